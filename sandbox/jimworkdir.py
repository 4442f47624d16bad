"""A local job's view of its grid job's directory, and its declared output files (ARC's semantics).

Static, stdlib only, Python >= 3.6, like wrapper.py, beside which it sits in the grid job's
directory; the wrapper imports it only for a job whose manifest has ``view`` or ``keep``
(jim/keep.py writes them from the description's ``directoryview`` and ``keepfiles``):

* ``view`` (the absolute directory of the grid job, e.g. an ARC session directory): the job runs
  in a private directory of its own, ``SCRATCH/.jim-view``, where every entry of that directory
  appears under its own name as a symbolic link to it (the inputs A-REX staged there), except the
  declared outputs, which are the local job's own files: N local jobs never write each other's.
  A directory on the way to a declared output is a private directory holding links to the entries
  of the real one; a declared directory (``plots/``) starts empty; missing ones are made.
* ``keep`` (the declared names, relative; ``plots/`` a directory): when the job has ended, its
  regular files of those names are moved into ``OUT/kept/<name>``, where jim merges them into the
  grid job's directory.  The job's own directory is walked one level at a time without following
  a symbolic link: a name that is a link, or lies behind one, is not kept (the log says so).

A declared name that leaves the directory (absolute, ``..`` past its top) is refused: the wrapper
fails the attempt with the reason (jim refuses such a description at submit already).
"""

import errno
import os
import stat

#: The job's private view, in its scratch directory; the declared outputs, in its attempt directory.
VIEW = ".jim-view"
KEPT = "kept"
#: The most entries of one directory linked into a view, and of files kept of one local job.
MAX_ENTRIES = 100000
MAX_KEPT = 10000
MAX_DEPTH = 32
_DIR = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def split_name(name):
    """(parts, is a directory) of a declared output name; ValueError for one that leaves the directory."""
    parts = []  # type: list
    for part in name.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if not parts:
                raise ValueError("declared output %r leaves the job's directory" % name)
            parts.pop()
        else:
            parts.append(part)
    if not parts or name.startswith("/"):
        raise ValueError("declared output %r is not a name in the job's directory" % name)
    return parts, name.endswith("/")


def keep_tree(keep):
    """The declared names as a tree: name -> subtree (a directory on the way), "file" or "dir"."""
    tree = {}  # type: dict
    for parts, directory in keep:
        node = tree
        for part in parts[:-1]:
            sub = node.get(part)
            if not isinstance(sub, dict):
                sub = node[part] = {}
            node = sub
        node.setdefault(parts[-1], "dir" if directory else "file")
    return tree


def make_private(dst, tree):
    """The private directories of ``tree`` under ``dst`` (declared directories and those on the way)."""
    for name, sub in tree.items():
        path = os.path.join(dst, name)
        if sub != "file" and not os.path.lexists(path):
            os.mkdir(path, 0o700)
            if isinstance(sub, dict):
                make_private(path, sub)


def fill(src, dst, tree, depth=0):
    """Link every entry of ``src`` into ``dst`` but the declared ones; the number linked."""
    names = os.listdir(src)
    if len(names) > MAX_ENTRIES:
        raise RuntimeError("%s has %d entries, more than %d" % (src, len(names), MAX_ENTRIES))
    linked = 0
    for name in names:
        sub = tree.get(name)
        if sub is None:
            os.symlink(os.path.join(src, name), os.path.join(dst, name))
            linked += 1
        elif isinstance(sub, dict):  # (a directory on the way to a declared output: private, its entries linked)
            path = os.path.join(src, name)
            os.mkdir(os.path.join(dst, name), 0o700)
            if depth < MAX_DEPTH and stat.S_ISDIR(os.lstat(path).st_mode):
                linked += fill(path, os.path.join(dst, name), sub, depth + 1)
    make_private(dst, tree)
    return linked


class View:
    """The job's working directory (``run.cwd``) and its declared outputs, for one attempt (``run``:
    the wrapper's LocalRun)."""

    def __init__(self, run):
        self.run = run
        self.keep = [split_name(n) for n in run.manifest.get("keep") or []]
        source = run.manifest.get("view")
        if not source:
            return
        run.cwd = os.path.join(run.scratch, VIEW)
        os.mkdir(run.cwd, 0o700)
        try:
            linked = fill(source, run.cwd, keep_tree(self.keep))
        except OSError as e:
            raise RuntimeError("no view of the job's directory %s: %s" % (source, e.strerror or e))
        run.log("view of %s in %s: %d entries linked" % (source, run.cwd, linked))

    def keep_outputs(self):
        """Move the job's declared outputs (regular files) into OUT/kept/; the number moved."""
        dest = os.path.join(self.run.outdir, KEPT)
        moved = [0]
        top = os.open(self.run.cwd, _DIR)
        try:
            for parts, _directory in self.keep:
                fd = self.walk(top, parts[:-1])
                if fd is None:
                    continue
                try:
                    self.take(fd, parts[-1], os.path.join(dest, *parts), moved, 0)
                finally:
                    os.close(fd)
        finally:
            os.close(top)
        if moved[0]:
            self.run.log("%d declared output file(s) kept in %s" % (moved[0], dest))
        return moved[0]

    def walk(self, top, parts):
        """A new fd of the directory ``parts`` below ``top``, never through a link; None (logged) otherwise."""
        fd = os.dup(top)
        for i, part in enumerate(parts):
            try:
                sub = os.open(part, _DIR, dir_fd=fd)
            except OSError as e:
                os.close(fd)
                if e.errno != errno.ENOENT:
                    self.run.log("declared output under %r not kept: %s" % ("/".join(parts[: i + 1]), e.strerror))
                return None
            os.close(fd)
            fd = sub
        return fd

    def take(self, fd, name, dest, moved, depth):
        """Move entry ``name`` of directory ``fd`` to ``dest``: a regular file, or a directory's files."""
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except OSError:
            return
        if stat.S_ISREG(st.st_mode) and moved[0] < MAX_KEPT:
            self.copy(fd, name, dest)
            os.unlink(name, dir_fd=fd)
            moved[0] += 1
        elif stat.S_ISDIR(st.st_mode) and depth < MAX_DEPTH:
            sub = os.open(name, _DIR, dir_fd=fd)
            try:
                for entry in sorted(os.listdir(sub)):
                    self.take(sub, entry, os.path.join(dest, entry), moved, depth + 1)
            finally:
                os.close(sub)
        else:
            self.run.log("declared output %s not kept: not a regular file or directory" % dest)

    @staticmethod
    def copy(fd, name, dest):
        src = os.open(name, _FILE, dir_fd=fd)
        try:
            if not stat.S_ISREG(os.fstat(src).st_mode):
                return
            parent = os.path.dirname(dest)
            if not os.path.isdir(parent):
                os.makedirs(parent, 0o700)
            out = os.open(dest, _NEW, 0o600)
            with os.fdopen(out, "wb") as f:
                while True:
                    chunk = os.read(src, 1 << 20)
                    if not chunk:
                        break
                    f.write(chunk)
        finally:
            os.close(src)
