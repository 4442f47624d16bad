#
# Globus::GRAM::JobManager::jim -- the GRAM5 job manager module of jim.
#
# Installed by `jim gram-install` as
#     /usr/share/perl5/Globus/GRAM/JobManager/jim.pm
# (globus-job-manager refuses a -type whose module is not at that path).
#
# The job manager runs this module as the MAPPED user, inside long-lived
# Perl coprocesses (globus-job-manager-script.pl -c interactive), and reads
# its answers from our stdout. Two rules follow from that:
#
#   * Nothing but GRAM_SCRIPT_<KEY>:<value> lines may reach stdout: any other
#     line fails the job with error 25. The jim command's stdout is captured
#     through a pipe; its stderr goes to <job dir>/jim.stderr.
#   * GRAM has no timeout on script calls: a hung call holds one of the job
#     manager's 5 script slots forever. Every jim call is bounded by
#     jim_timeout; on expiry its whole process group is killed.
#
# Each method is one call of the jim command:
#
#   submit:  jim submit --description <job dir>/jim-description.json
#            (X509_USER_PROXY: the job's delegated proxy, whose subject and
#            VOMS FQANs jim records as the grid job's identity)
#   poll:    jim poll   --job-id ID
#   cancel:  jim cancel --job-id ID
#
# The description file is the whole GRAM job description as JSON (canonical
# lower-case attribute name -> list of strings; environment pairs as nested
# lists). jim answers with KEY=VALUE lines: JOB_ID, JOB_STATE (a name),
# EXIT_CODE, and on error ERROR=<GRAM error number> plus MESSAGE=<one line>.
#
# Configuration: /etc/globus/globus-jim.conf (JIM_GRAM_CONF overrides the
# path, for tests), read once per Perl process like globus-fork.conf:
#   jim_command=PATH   the jim executable (default: jim on PATH)
#   jim_timeout=S      seconds allowed per call (default 30)
#   jim_home=DIR       exported as JIM_HOME (optional; jim's default is ~/.jim)
#   jim_config=FILE    exported as JIM_CONFIG (optional)
#   seg_dir=DIR        SEG root, read by the jobmanager-jim-seg wrapper
#
# Push (SEG) mode: the service jobmanager-jim-seg starts globus-job-manager
# with `-seg-module jim` through jim's wrapper, which exports
# JOB_MANAGER_SEG_LOG_PATH, the user's own event directory. At submit the
# module finds both in /proc/<job manager>/ (see seg_dir) and hands the
# directory to jim as JIM_SEG_DIR; jim appends the state changes there and
# the job manager never calls poll.
#
use Globus::GRAM::Error;
use Globus::GRAM::JobState;
use Globus::GRAM::JobManager;
use Globus::Core::Paths;
use Globus::Core::Config;
use Errno ();
use Fcntl ();
use JSON::PP ();
use POSIX ();
use Time::HiRes ();

use strict;

# (the use lines stay in package main, as in fork.pm: used from inside this
# package they imported POSIX's functions, getenv() included, into it, and
# those shadowed the base-class methods)
package Globus::GRAM::JobManager::jim;

our @ISA = qw(Globus::GRAM::JobManager);

our ($jim_command, $jim_timeout, $jim_home, $jim_config);

BEGIN
{
    my $path = $ENV{JIM_GRAM_CONF} || '${sysconfdir}/globus/globus-jim.conf';
    my $config = new Globus::Core::Config($path);
    my $get = sub {
        my $v = $config ? $config->get_attribute($_[0]) : undef;
        return (defined($v) && $v ne '') ? $v : undef;
    };
    $jim_command = $get->('jim_command') || 'jim';
    $jim_timeout = $get->('jim_timeout');
    $jim_timeout = 30 unless defined($jim_timeout) && $jim_timeout =~ m/^\d+(\.\d+)?$/
                             && $jim_timeout > 0;
    $jim_home = $get->('jim_home');
    $jim_config = $get->('jim_config');
}

# jim prints state names; GRAM wants the numbers of Globus::GRAM::JobState.
my %STATE = (
    PENDING     => Globus::GRAM::JobState::PENDING,
    ACTIVE      => Globus::GRAM::JobState::ACTIVE,
    FAILED      => Globus::GRAM::JobState::FAILED,
    DONE        => Globus::GRAM::JobState::DONE,
    SUSPENDED   => Globus::GRAM::JobState::SUSPENDED,
    UNSUBMITTED => Globus::GRAM::JobState::UNSUBMITTED,
    STAGE_IN    => Globus::GRAM::JobState::STAGE_IN,
    STAGE_OUT   => Globus::GRAM::JobState::STAGE_OUT,
);

my $MAX_OUTPUT = 1 << 20;       # bytes of jim stdout kept per call

sub new
{
    my $proto = shift;
    my $class = ref($proto) || $proto;
    my $self = $class->SUPER::new(@_);   # makes the job dir, rewrites stdio URLs

    bless $self, $class;
    $self->{jim_dir} = $self->job_dir();  # job_dir() logs each call: ask once
    return $self;
}

# ---------------------------------------------------------------- methods

sub submit
{
    my $self = shift;
    my $description = $self->{JobDescription};

    # GRAM's stage_out copies stdout and stderr after DONE and fails the job
    # (error 73) if one is missing; jim fills them at DONE. Create them now.
    foreach my $which ('stdout', 'stderr')
    {
        my $path = $self->stdio_path($which) or next;
        next if -e $path;
        local *FH;
        if (sysopen(FH, $path, Fcntl::O_WRONLY() | Fcntl::O_CREAT() | Fcntl::O_APPEND(), 0600)) { close(FH); }
        else { $self->log("jim: cannot create $which file $path: $!"); }
    }

    my $file = $self->write_description();
    return $self->failure(Globus::GRAM::Error::TEMP_SCRIPT_FILE_FAILED(),
                          "jim.pm: cannot write the job description to $self->{jim_dir}: $!", 1)
        unless defined $file;

    my %env;
    # The grid identity jim records is the job's delegated proxy: the file the job
    # manager exports into this job's directory, else the X509_USER_PROXY it sets
    # for this script. Never the RSL's environment (that is the job's own).
    my $proxy = "$self->{jim_dir}/x509_user_proxy";
    $proxy = $ENV{X509_USER_PROXY} unless -f $proxy;
    $env{X509_USER_PROXY} = $proxy if defined($proxy) && $proxy ne '' && -f $proxy;
    my $seg = seg_dir();
    if (defined $seg)
    {
        $env{JIM_SEG_DIR} = $seg;
        $self->log("jim: push mode, SEG directory $seg");
    }
    my $r = $self->run_jim(\%env, 'submit', '--description', $file);
    if ($r->{timed_out} || $r->{ERROR} || $r->{rc} != 0)
    {
        return $self->failure_of($r, Globus::GRAM::Error::JOB_EXECUTION_FAILED(), 1);
    }
    my $job_id = $r->{JOB_ID};
    if (!defined($job_id) || $job_id !~ m/^[^\s,;]+$/)
    {
        return $self->failure(Globus::GRAM::Error::JOB_EXECUTION_FAILED(),
                              'jim submit printed no usable JOB_ID', 1);
    }
    my $state = state_value($r->{JOB_STATE});
    $state = Globus::GRAM::JobState::PENDING
        unless defined($state) && ($state == Globus::GRAM::JobState::PENDING
                                   || $state == Globus::GRAM::JobState::ACTIVE);
    return { JOB_ID => $job_id, JOB_STATE => $state };
}

# A poll that fails or times out is "no news" ({}): the next poll, 10 s
# later, asks again. Only an answer with a known state changes anything.
sub poll
{
    my $self = shift;
    my $job_id = $self->{JobDescription}->jobid();

    my $r = $self->run_jim({}, 'poll', '--job-id', $job_id);
    return {} if $r->{timed_out} || $r->{ERROR} || $r->{rc} != 0;

    my $state = state_value($r->{JOB_STATE});
    if (!defined $state)
    {
        $self->log("jim: poll gave no known JOB_STATE; no change");
        return {};
    }
    if ($state == Globus::GRAM::JobState::FAILED)
    {
        # A plain JOB_STATE:4 leaves the failure code at 0, which the clients
        # report as success; send the reason and a failure code instead.
        my $msg = $r->{MESSAGE};
        $msg = "jim grid job $job_id failed"
             . (defined($r->{EXIT_CODE}) ? ", exit code $r->{EXIT_CODE}" : '')
            unless defined($msg) && $msg ne '';
        return $self->failure(Globus::GRAM::Error::JOB_EXECUTION_FAILED(), $msg, 0);
    }
    return { JOB_STATE => $state };
}

sub cancel
{
    my $self = shift;
    my $job_id = $self->{JobDescription}->jobid();

    my $r = $self->run_jim({}, 'cancel', '--job-id', $job_id);
    if ($r->{timed_out} || $r->{ERROR} || $r->{rc} != 0)
    {
        return $self->failure_of($r, Globus::GRAM::Error::JOB_CANCEL_FAILED(), 0);
    }
    return { JOB_STATE => Globus::GRAM::JobState::FAILED };
}

# ---------------------------------------------------------------- helpers

# State name (or number) -> GRAM state number; undef when unknown.
sub state_value
{
    my $s = shift;
    return undef unless defined($s) && $s ne '';
    return int($s) if $s =~ m/^\d+$/ && grep { $_ == $s } values %STATE;
    return $STATE{uc($s)};
}

# The SEG directory jim must append to, or undef in poll mode. The job
# manager starts these script processes with a fixed environment (HOME,
# LOGNAME, PATH, GLOBUS_LOCATION, GLOBUS_SPOOL_DIR only), so the mode and the
# directory are read from the job manager itself, our parent: its
# "-seg-module NAME" argument and the JOB_MANAGER_SEG_LOG_PATH its wrapper
# exported (both what its SEG module uses). Found once per process.
my $seg_found;
my $seg_path;
sub seg_dir
{
    return $seg_path if $seg_found;
    $seg_found = 1;
    my $ppid = getppid();
    my @argv = split(/\0/, slurp("/proc/$ppid/cmdline"));
    my $module = $ENV{JOB_MANAGER_SEG_SCHEDULER};
    for my $i (0 .. $#argv - 1)
    {
        $module = $argv[$i + 1] if $argv[$i] eq '-seg-module';
    }
    return $seg_path = undef unless defined($module) && $module ne '';
    foreach (split(/\0/, slurp("/proc/$ppid/environ")))
    {
        $seg_path = $1 if m/^JOB_MANAGER_SEG_LOG_PATH=(.+)$/s;
    }
    $seg_path ||= $ENV{JOB_MANAGER_SEG_LOG_PATH};
    # else the SEG module's default: ${localstatedir}/lib/globus/globus-seg-NAME
    $seg_path ||= "/var/lib/globus/globus-seg-$module";
    return $seg_path;
}

sub slurp
{
    local *IN;
    local $/;
    open(IN, '<', $_[0]) or return '';
    my $text = <IN>;
    close(IN);
    return defined($text) ? $text : '';
}

# Local path of the job's stdout/stderr, or undef (none, /dev/null, URL).
sub stdio_path
{
    my ($self, $which) = @_;
    my $description = $self->{JobDescription};
    my $path = $description->$which();
    return undef if !defined($path) || ref($path) || $path eq ''
                    || $path eq '/dev/null' || $path =~ m|://|;
    if ($path !~ m|^/|)
    {
        my $dir = $description->directory();
        $dir = $ENV{HOME} unless defined($dir) && $dir ne '';
        $path = "$dir/$path";
    }
    return $path;
}

# Write every attribute of the job description as JSON into the job dir
# (atomically) and return the file name, or undef.
sub write_description
{
    my $self = shift;
    my $description = $self->{JobDescription};
    my $file = "$self->{jim_dir}/jim-description.json";
    my %copy;

    # environment() adds PATH when the client gave none (as fork.pm sees it).
    my @unused = $description->environment();
    foreach my $key (keys %{$description})
    {
        next if $key =~ m/^_/;
        $copy{$key} = as_text($description->{$key});
    }
    my $json = JSON::PP->new->canonical->utf8->pretty->encode(\%copy);
    local *OUT;
    open(OUT, '>', "$file.tmp") or return undef;
    print OUT $json;
    close(OUT) or return undef;
    rename("$file.tmp", $file) or return undef;
    return $file;
}

# Values arrive as byte strings; decode valid UTF-8 so JSON::PP does not
# encode it twice (invalid bytes stay Latin-1 and still give valid JSON).
sub as_text
{
    my $v = shift;
    return [ map { as_text($_) } @{$v} ] if ref($v) eq 'ARRAY';
    return $v if ref($v) || !defined($v);
    my $s = "$v";
    utf8::decode($s);
    return $s;
}

# Run the jim command with a deadline. Returns a hash: rc (exit status, -1
# if it could not run), timed_out, seconds, and the KEY=VALUE answers.
sub run_jim
{
    my ($self, $env, @args) = @_;
    my @cmd = ($jim_command, @args);
    my $errlog = "$self->{jim_dir}/jim.stderr";
    my %r = (rc => -1, timed_out => 0, verb => $args[0]);
    my $t0 = Time::HiRes::time();

    local (*RD, *WR);
    if (!pipe(RD, WR))
    {
        $r{MESSAGE} = "jim.pm: pipe failed: $!";
        return \%r;
    }
    my $pid = fork();
    if (!defined $pid)
    {
        $r{MESSAGE} = "jim.pm: fork failed: $!";
        close(RD); close(WR);
        return \%r;
    }
    if ($pid == 0)
    {
        # Child: own process group (so a timeout kills all of it); stdout is
        # the pipe, never the job manager's; stderr to the log in the job dir.
        close(RD);
        POSIX::setpgid(0, 0);
        open(STDIN, '<', '/dev/null');
        open(STDOUT, '>&', \*WR) or POSIX::_exit(126);
        open(STDERR, '>>', $errlog) or open(STDERR, '>', '/dev/null');
        close(WR);
        if (defined $jim_home)
        {
            my $user = getpwuid($<);
            ($ENV{JIM_HOME} = $jim_home) =~ s/%u/$user/g;
        }
        $ENV{JIM_CONFIG} = $jim_config if defined $jim_config;
        $ENV{JIM_GRAM_JOB_DIR} = $self->{jim_dir};
        $ENV{JIM_GRAM_UNIQID} = $self->{JobDescription}->uniqid() || '';
        $ENV{$_} = $env->{$_} foreach keys %{$env};
        exec { $cmd[0] } @cmd;
        print STDERR "jim.pm: cannot run $cmd[0]: $!\n";
        POSIX::_exit(127);
    }
    POSIX::setpgid($pid, $pid);     # also from here: no race with the kill
    close(WR);

    my ($out, $eof, $status) = ('', 0, undef);
    my $deadline = $t0 + $jim_timeout;
    while (1)
    {
        if (!defined($status) && waitpid($pid, POSIX::WNOHANG()) == $pid)
        {
            $status = $?;
        }
        last if $eof && defined $status;
        my $left = $deadline - Time::HiRes::time();
        if ($left <= 0)
        {
            $r{timed_out} = 1;
            last;
        }
        if ($eof)       # stdout closed, process still running
        {
            Time::HiRes::sleep($left < 0.05 ? $left : 0.05);
            next;
        }
        my $rin = '';
        vec($rin, fileno(RD), 1) = 1;
        my $n = select(my $rout = $rin, undef, undef, $left < 0.1 ? $left : 0.1);
        if ($n > 0)
        {
            my $buf;
            my $got = sysread(RD, $buf, 65536);
            if (!defined $got) { $eof = 1 unless $!{EINTR}; }
            elsif ($got == 0) { $eof = 1; }
            elsif (length($out) < $MAX_OUTPUT) { $out .= $buf; }
        }
        # exited, but something it started still holds the pipe: stop reading
        last if defined($status) && !$eof && $n == 0;
    }
    close(RD);

    if ($r{timed_out})
    {
        kill('TERM', -$pid) or kill('TERM', $pid);
        my $until = Time::HiRes::time() + 2;
        while (waitpid($pid, POSIX::WNOHANG()) != $pid)
        {
            if (Time::HiRes::time() > $until)
            {
                kill('KILL', -$pid) or kill('KILL', $pid);
                waitpid($pid, 0);
                last;
            }
            Time::HiRes::sleep(0.05);
        }
        kill('KILL', -$pid);        # whatever is left of its process group
        $r{rc} = 124;
    }
    else
    {
        $r{rc} = ($status & 127) ? 128 + ($status & 127) : ($status >> 8);
    }
    $r{seconds} = sprintf('%.2f', Time::HiRes::time() - $t0);

    my ($junk, @answer) = (0);
    foreach my $line (split(/\r?\n/, $out))
    {
        if ($line =~ m/^(JOB_ID|JOB_STATE|EXIT_CODE|ERROR|MESSAGE)=(.*)$/)
        {
            $r{$1} = $2;
            push(@answer, $line);
        }
        elsif ($line =~ m/\S/ && $junk++ < 5)
        {
            $self->log("jim: ignored stdout line: " . printable($line));
        }
    }
    $r{ERROR} = undef unless defined($r{ERROR}) && $r{ERROR} =~ m/^\d+$/ && $r{ERROR} > 0;
    $self->log("jim: '@cmd' -> exit $r{rc} in $r{seconds} s"
               . ($r{timed_out} ? " (killed after $jim_timeout s)" : '')
               . ($junk ? ", $junk junk line(s)" : '')
               . ': ' . printable(join(' ', @answer)));
    return \%r;
}

# The failure of a jim call as a GRAM error: jim's ERROR number and MESSAGE
# when it gave them, else the default code and what we know.
sub failure_of
{
    my ($self, $r, $default, $at_submit) = @_;
    my $msg = $r->{MESSAGE};
    if (!defined($msg) || $msg eq '')
    {
        if ($r->{timed_out})
        {
            $msg = "jim $r->{verb} did not answer within $jim_timeout s (killed)";
        }
        else
        {
            $msg = "jim $r->{verb} failed with exit status $r->{rc}";
            my $last = $self->last_stderr_line();
            $msg .= ": $last" if defined $last;
        }
    }
    my $error = $r->{ERROR} ? new Globus::GRAM::Error($r->{ERROR}) : $default;
    return $self->failure($error, $msg, $at_submit);
}

# Send the reason as GT3_FAILURE_MESSAGE (what clients print as the reason or
# "Details:"), and at submit also into the job's stderr file, as slurm.pm does.
sub failure
{
    my ($self, $error, $msg, $at_submit) = @_;
    $msg = printable($msg);
    $msg = substr($msg, 0, 1000) if length($msg) > 1000;
    $self->respond({ GT3_FAILURE_MESSAGE => $msg });
    if ($at_submit)
    {
        my $path = $self->stdio_path('stderr');
        local *ERR;
        if (defined($path) && open(ERR, '>>', $path))
        {
            print ERR "$msg\n";
            close(ERR);
        }
    }
    $self->log("jim: failing with GRAM error " . $error->value() . ": $msg");
    return $error;
}

sub last_stderr_line
{
    my $self = shift;
    local *ERR;
    open(ERR, '<', "$self->{jim_dir}/jim.stderr") or return undef;
    seek(ERR, -4096, 2) or seek(ERR, 0, 0);
    my @lines = grep { m/\S/ } <ERR>;
    close(ERR);
    return undef unless @lines;
    chomp(my $last = $lines[-1]);
    return printable($last);
}

# One line of plain text: no control characters (a newline would end the
# GRAM_SCRIPT_ line early and the rest would fail the job with error 25).
sub printable
{
    my $s = shift;
    $s = '' unless defined $s;
    $s =~ s/[\x00-\x1f\x7f]+/ /g;
    return $s;
}

1;
# vim: filetype=perl :
