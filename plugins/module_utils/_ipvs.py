# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# Note that this module util is **PRIVATE** to the collection. It can change without notice.
# Do not use this from other collections or standalone plugins/modules!

"""The kernel's IPVS table on an LVS director, read with ipvsadm.

Two listings are read and merged: ``ipvsadm -L -n --exact`` (scheduler, persistence, flags; per real server the
forwarding method, weight and connection counts) and ``ipvsadm -L -n --stats --exact`` (per virtual service and
real server the counters conns, inpkts, outpkts, inbytes and outbytes). The parsers follow the output of ipvsadm
1.26 to 1.31 and tolerate any amount of whitespace between fields; counters with the K/M/G/T suffixes ipvsadm
prints without --exact are accepted (and are then rounded down by ipvsadm).

A missing ipvsadm or a kernel without IPVS raises IpvsError with reason 'ipvsadm_missing' or 'ipvs_unavailable'
(UNAVAILABLE_REASONS); other failures have reason 'permission_denied', 'command_failed' or 'parse_error'.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import ipaddress
import re

LIST_ARGS = ('-L', '-n', '--exact')
STATS_ARGS = ('-L', '-n', '--stats', '--exact')

PROTOCOLS = ('TCP', 'UDP', 'SCTP')
# ipvsadm's names of the forwarding methods (fwd_name()) and the names used here (those of keepalived's lb_kind).
FORWARD_METHODS = {'Route': 'dr', 'Masq': 'nat', 'Tunnel': 'tunnel', 'Local': 'local'}
STAT_FIELDS = ('conns', 'inpkts', 'outpkts', 'inbytes', 'outbytes')

# Why IPVS could not be read. The first two mean that the host is no IPVS director as it stands.
UNAVAILABLE_REASONS = ('ipvsadm_missing', 'ipvs_unavailable')
FAILURE_REASONS = UNAVAILABLE_REASONS + ('permission_denied', 'command_failed', 'parse_error')

_VERSION_RE = re.compile(r'^IP Virtual Server version\s+(?P<version>\S+)(?:\s+\(size=(?P<size>\d+)\))?')
_BRACKETED_RE = re.compile(r'^\[(?P<address>[^\]]+)\]:(?P<port>\d+)$')
_PLAIN_RE = re.compile(r'^(?P<address>[^\[\]:]+):(?P<port>\d+)$')
_COUNTER_RE = re.compile(r'^(?P<value>\d+)(?P<suffix>[KMGT]?)$')
_SUFFIXES = {'': 1, 'K': 10 ** 3, 'M': 10 ** 6, 'G': 10 ** 9, 'T': 10 ** 12}


class IpvsError(Exception):
    """The IPVS table could not be read; reason is one of FAILURE_REASONS."""

    def __init__(self, msg, reason):
        super(IpvsError, self).__init__(msg)
        self.reason = reason

    @property
    def unavailable(self):
        """Whether the host has no ipvsadm or its kernel no IPVS (as opposed to an error)."""
        return self.reason in UNAVAILABLE_REASONS


def _parse_error(number, line, why):
    return IpvsError('cannot parse line %d of the ipvsadm output (%s): %r' % (number, why, line), 'parse_error')


def parse_address(text):
    """Return (address, port, family) of 'a.b.c.d:port' or '[v6]:port'; family is 'ipv4' or 'ipv6'."""
    match = _BRACKETED_RE.match(text) or _PLAIN_RE.match(text)
    if not match:
        raise ValueError('not ADDRESS:PORT: %r' % text)
    address = match.group('address')
    return address, int(match.group('port')), 'ipv6' if ':' in address else 'ipv4'


def parse_counter(text):
    """Return the integer of an ipvsadm counter: exact digits, or digits with a K, M, G or T suffix (powers of 1000)."""
    match = _COUNTER_RE.match(text)
    if not match:
        raise ValueError('not a counter: %r' % text)
    return int(match.group('value')) * _SUFFIXES[match.group('suffix')]


def _header(line, table):
    """Consume a heading line; return whether it was one."""
    match = _VERSION_RE.match(line)
    if match:
        table['ipvs_version'] = match.group('version')
        table['connection_table_size'] = int(match.group('size')) if match.group('size') else None
        return True
    tokens = line.split()
    return tokens[0] == 'Prot' or tokens[:2] == ['->', 'RemoteAddress:Port']


def _service_key(tokens):
    """Split a service line's tokens into (identity dict, remaining tokens)."""
    if tokens[0] == 'FWM':
        if len(tokens) < 2 or not tokens[1].isdigit():
            raise ValueError('FWM without a firewall mark')
        family, rest = 'ipv4', tokens[2:]
        if rest and rest[0] == 'IPv6':
            family, rest = 'ipv6', rest[1:]
        return {'protocol': None, 'address': None, 'port': None, 'fwmark': int(tokens[1]), 'family': family}, rest
    if tokens[0] not in PROTOCOLS:
        raise ValueError('unknown protocol %s' % tokens[0])
    if len(tokens) < 2:
        raise ValueError('no address')
    address, port, family = parse_address(tokens[1])
    return {'protocol': tokens[0].lower(), 'address': address, 'port': port, 'fwmark': None, 'family': family}, \
        tokens[2:]


def _identity(entry):
    return tuple(entry[k] for k in ('protocol', 'address', 'port', 'fwmark', 'family'))


def _service_options(service, tokens):
    """Fill scheduler, persistence and flags of a service from the tokens after its address."""
    if not tokens:
        raise ValueError('no scheduler')
    service.update(scheduler=tokens[0], persistent=None, persistence_mask=None, persistence_engine=None, flags=[])
    rest = list(tokens[1:])
    while rest:
        token = rest.pop(0)
        if token in ('persistent', 'mask', 'pe'):
            if not rest:
                raise ValueError('%s without a value' % token)
            value = rest.pop(0)
            if token == 'persistent':
                if not value.isdigit():
                    raise ValueError('persistent %s is no number of seconds' % value)
                service['persistent'] = int(value)
            else:
                service['persistence_mask' if token == 'mask' else 'persistence_engine'] = value
        elif token.startswith('('):
            # Scheduler flags, printed by ipvsadm 1.28 and later as "(flag-1,flag-2)"; spaces tolerated.
            group = [token]
            while not group[-1].endswith(')') and rest:
                group.append(rest.pop(0))
            service['flags'].extend(f for f in re.split(r'[\s,()]+', ' '.join(group)) if f)
        else:
            # ops, and scheduler flags given bare (flag-1, sh-fallback, sh-port, mh-fallback, mh-port, ...).
            service['flags'].extend(f for f in token.split(',') if f)


def parse_listing(text):
    """Parse `ipvsadm -L -n [--exact]`.

    Returns {'ipvs_version', 'connection_table_size', 'services': [service, ...]}, each service with protocol,
    address, port, fwmark, family, scheduler, persistent, persistence_mask, persistence_engine, flags and
    real_servers (address, port, forward, weight, active_connections, inactive_connections).
    """
    table = {'ipvs_version': None, 'connection_table_size': None, 'services': []}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or _header(line, table):
            continue
        tokens = line.split()
        try:
            if tokens[0] == '->':
                if not table['services']:
                    raise ValueError('real server before any virtual service')
                if len(tokens) != 6:
                    raise ValueError('expected ADDRESS:PORT FORWARD WEIGHT ACTIVECONN INACTCONN')
                address, port, _family = parse_address(tokens[1])
                table['services'][-1]['real_servers'].append({
                    'address': address,
                    'port': port,
                    'forward': FORWARD_METHODS.get(tokens[2], tokens[2].lower()),
                    'weight': int(tokens[3]),
                    'active_connections': int(tokens[4]),
                    'inactive_connections': int(tokens[5]),
                })
            else:
                service, rest = _service_key(tokens)
                _service_options(service, rest)
                service['real_servers'] = []
                table['services'].append(service)
        except ValueError as e:
            raise _parse_error(number, line, e) from e
    return table


def parse_stats(text):
    """Parse `ipvsadm -L -n --stats [--exact]`.

    Returns {'services': [service, ...]}, each service with protocol, address, port, fwmark, family, stats and
    real_servers (address, port, stats); stats maps each of STAT_FIELDS to an integer.
    """
    table = {'ipvs_version': None, 'connection_table_size': None, 'services': []}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or _header(line, table):
            continue
        tokens = line.split()
        try:
            if len(tokens) < len(STAT_FIELDS):
                raise ValueError('expected %d counters' % len(STAT_FIELDS))
            counters, head = tokens[-len(STAT_FIELDS):], tokens[:-len(STAT_FIELDS)]
            stats = dict(zip(STAT_FIELDS, (parse_counter(c) for c in counters)))
            if head and head[0] == '->':
                if not table['services']:
                    raise ValueError('real server before any virtual service')
                if len(head) != 2:
                    raise ValueError('expected ADDRESS:PORT and %d counters' % len(STAT_FIELDS))
                address, port, _family = parse_address(head[1])
                table['services'][-1]['real_servers'].append({'address': address, 'port': port, 'stats': stats})
            else:
                if not head:
                    raise ValueError('no virtual service')
                service, rest = _service_key(head)
                if rest:
                    raise ValueError('unexpected %s' % ' '.join(rest))
                service.update(stats=stats, real_servers=[])
                table['services'].append(service)
        except ValueError as e:
            raise _parse_error(number, line, e) from e
    return table


def merge(listing, stats):
    """Return the services of listing, each service and real server with the 'stats' of the same entry in stats.

    The two listings come from two runs of ipvsadm; an entry that appeared in between has stats None, and one that
    vanished in between is left out.
    """
    counters = {}
    for service in stats['services']:
        counters[_identity(service)] = (service['stats'], dict(
            ((rs['address'], rs['port']), rs['stats']) for rs in service['real_servers']))
    services = []
    for service in listing['services']:
        service_stats, server_stats = counters.get(_identity(service), (None, {}))
        merged = dict((k, v) for k, v in service.items() if k != 'real_servers')
        merged['stats'] = service_stats
        merged['real_servers'] = [dict(rs, stats=server_stats.get((rs['address'], rs['port'])))
                                  for rs in service['real_servers']]
        services.append(merged)
    return services


def _same_address(a, b):
    try:
        return ipaddress.ip_address(a) == ipaddress.ip_address(b)
    except ValueError:
        return a == b


def filter_services(services, address=None, port=None, protocol=None, fwmark=None):
    """Return the services matching every criterion given (None: any); addresses compare as IP addresses."""
    return [s for s in services
            if (address is None or (s['address'] is not None and _same_address(s['address'], address)))
            and (port is None or s['port'] == port)
            and (protocol is None or s['protocol'] == protocol.lower())
            and (fwmark is None or s['fwmark'] == fwmark)]


def failure(argv, rc, out, err):
    """Return the IpvsError for a failed run of ipvsadm."""
    text = ' '.join(' '.join((err or '', out or '')).split())
    command = ' '.join(argv)
    if "Can't initialize ipvs" in text or 'Protocol not available' in text:
        if 'Permission denied' in text or 'must be root' in text or 'Operation not permitted' in text:
            return IpvsError('%s failed with rc %d: %s. Fix: run it as root (become: true), or with CAP_NET_ADMIN'
                             % (command, rc, text), 'permission_denied')
        return IpvsError('the kernel has no IPVS: %s failed with rc %d: %s. Fix: load the ip_vs kernel module '
                         '(modprobe ip_vs; for a container, on its host)' % (command, rc, text), 'ipvs_unavailable')
    if 'Permission denied' in text or 'must be root' in text:
        return IpvsError('%s failed with rc %d: %s. Fix: run it as root (become: true)' % (command, rc, text),
                         'permission_denied')
    return IpvsError('%s failed with rc %d: %s' % (command, rc, text or '(no output)'), 'command_failed')


def missing_ipvsadm(path=None):
    """Return the IpvsError for an ipvsadm that is not there."""
    where = 'ipvsadm %s is not an executable file' % path if path else 'ipvsadm is not on PATH nor in the sbin dirs'
    return IpvsError('%s. Fix: install the ipvsadm package, or give its path' % where, 'ipvsadm_missing')


def _run(run_command, ipvsadm, args):
    argv = [ipvsadm] + list(args)
    rc, out, err = run_command(argv)
    if rc != 0:
        raise failure(argv, rc, out, err)
    return out


def read_ipvs(run_command, ipvsadm):
    """Return {'ipvs_version', 'connection_table_size', 'services'} of the host, read with the ipvsadm given.

    run_command is AnsibleModule.run_command or alike: it takes an argv list and returns (rc, stdout, stderr).
    Raises IpvsError.
    """
    listing = parse_listing(_run(run_command, ipvsadm, LIST_ARGS))
    stats = parse_stats(_run(run_command, ipvsadm, STATS_ARGS))
    return {
        'ipvs_version': listing['ipvs_version'],
        'connection_table_size': listing['connection_table_size'],
        'services': merge(listing, stats),
    }
