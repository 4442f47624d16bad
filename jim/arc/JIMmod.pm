package JIMmod;
# jim: installed by jim arc-install (the marker jim arc-install --uninstall looks for)
#
# The information-provider module of the ARC LRMS "jim": CEinfo.pl (run by
# A-REX about every 60 s, as root) loads <uc(lrms)>mod.pm from its own
# directory. Everything is asked of jim in ONE call,
#   @JIM@ arc-backend info --config <runtime config> --controldir <dir>
# which answers one JSON object (cluster and queue figures from jim's batch
# adapter, and the status of every job A-REX has in the LRMS: Q, R, S,
# EXECUTED). The logic lives in jim; this module only reshapes the answer.
# The CPU figures are the batch system's (its capacity); a figure jim cannot
# say is null, published as 0 (totalcpus, usedcpus) or left out.

require Exporter;
our @ISA = qw(Exporter);
our @EXPORT_OK = qw(get_lrms_info get_lrms_options_schema);

use strict;
use warnings;
use JSON::PP;
use LogUtils;

our $log = LogUtils->getLogger(__PACKAGE__);
our $JIM = '@JIM@';
our $TIMEOUT = 60;

sub get_lrms_options_schema {
    return {
        'queues' => { '*' => { 'users' => [ '' ] } },
        'jobs' => [ '' ],
        'controldir' => '*',
    };
}

sub jim_info {
    my ($controldir) = @_;
    my @cmd = ('timeout', '-k', '5', $TIMEOUT, $JIM, 'arc-backend', 'info');
    my $cfg = $CEInfo::configfile || $ENV{ARC_CONFIG};
    push @cmd, '--config', $cfg if $cfg;
    push @cmd, '--controldir', $controldir if $controldir;
    my $pid = open(my $fh, '-|');
    if (!defined $pid) {
        $log->warning("cannot run jim: $!");
        return {};
    }
    if ($pid == 0) {
        exec { $cmd[0] } @cmd;
        exit 127;
    }
    local $/;
    my $text = <$fh>;
    close $fh;
    my $info = eval { decode_json($text || '{}') };
    if (!$info || ref($info) ne 'HASH') {
        $log->warning("jim arc-backend info gave no usable answer (exit " . ($? >> 8) . ")");
        return {};
    }
    return $info;
}

sub get_lrms_info(\%) {
    my $options = shift;
    my $info = jim_info($options->{controldir});
    my $lrms_info = { cluster => {}, queues => {}, jobs => {}, nodes => {} };
    my $total = $info->{totalcpus} || 0;
    my $running = $info->{running} || 0;
    my $queued = $info->{queued} || 0;
    my $free = defined $info->{freecpus} ? $info->{freecpus}
             : defined $info->{free_slots} ? $info->{free_slots} : 0;
    $free = 0 if $free < 0;
    my $used = defined $info->{usedcpus} ? $info->{usedcpus} : ($running < $total ? $running : $total);

    my $c = $lrms_info->{cluster};
    $c->{lrms_type} = 'jim';
    $c->{lrms_version} = $info->{lrms_version} || 'unknown';
    $c->{totalcpus} = $total;
    $c->{usedcpus} = $used;
    $c->{queuedcpus} = $queued;
    $c->{runningjobs} = $running;
    $c->{queuedjobs} = $queued;
    $c->{cpudistribution} = $info->{cpudistribution} || '';

    my $states = $info->{jobs} || {};
    for my $id (@{ $options->{jobs} || [] }) {
        my $st = $states->{$id} || 'O';
        my $job = { status => $st, comment => [ "LRMS: jim grid job $id" ] };
        $job->{rank} = 0 if $st eq 'Q';
        $lrms_info->{jobs}{$id} = $job;
    }

    for my $qname (keys %{ $options->{queues} || {} }) {
        my $q = $lrms_info->{queues}{$qname} = {
            status => $free, maxrunning => 10000, maxqueuable => 10000, maxuserrun => 10000,
            running => $running, queued => $queued, totalcpus => $total, users => {},
        };
        for my $u (@{ $options->{queues}{$qname}{users} || [] }) {
            $q->{users}{$u} = { freecpus => { $free => 0 }, queuelength => $queued };
        }
    }
    return $lrms_info;
}

1;
