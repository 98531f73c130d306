# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# Note that this module util is **PRIVATE** to the collection. It can change without notice.
# Do not use this from other collections or standalone plugins/modules!

"""Error-rate circuit breaker for one real server of an LVS virtual service, run by keepalived.

keepalived runs this file as a MISC_CHECK with misc_dynamic, once per check and real server, on each director
(it is copied there as a standalone program: standard library only). Each run reads the node's edge counters
(llmops_edge_responses_total{class="1xx".."5xx"} at https://<node>:8000/edge/metrics, mTLS), updates the
node's persisted breaker state and answers keepalived with its exit code: 0 up with the configured weight,
1 down, 2+w up with weight w.

States and rules (step() is the whole decision; it is pure and is given the time):
- closed: full weight. It opens (weight 0) when the sliding window holds at least min_requests requests and
  errors/requests >= threshold, unless fewer than floor other nodes of the service would still serve: then it
  stays closed and the decision says floor_held.
- open: weight 0 for the cool-down, which is cooldown after a clean close, doubled at each consecutive re-open,
  capped at max_cooldown, so a node is never quarantined for ever. Then half_open. It goes half_open at once
  when fewer than floor other nodes serve (the breaker never keeps the service below its floor).
- half_open: half_open_weight; the window restarts when it is entered. It re-opens as soon as the window trips
  the closed rule (min_requests and the threshold, over the traffic seen since), floor permitting. It closes
  after a full window that did not trip: below the threshold with min_requests requests, or without a single
  error on less volume (no traffic at all included). Otherwise it stays half_open while the window slides on.
  A clean close resets the cool-down.

Window: the delta between the newest sample and the newest sample at or before now - window (the oldest kept
while the window is still filling). A counter that goes down (nginx restarted), a clock that went back and a gap
between checks longer than the window (the window must span several keepalived delay_loop) each restart the
samples. A failed read of the counters (timeout, refused, TLS, HTTP status, unparsable) is a failed check
(exit 1), recorded so that the peers do not count the node as serving; the breaker state is kept.

Peers are the persisted states of the service's other nodes in the same state directory (each director keeps
its own): one serves when it is closed or half_open, its last check succeeded and its update is at most stale
seconds old, so stale must exceed keepalived's delay_loop. The directory is locked while the peers are read and
the own state written, so two checks never both take the last nodes out.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import argparse
import contextlib
import dataclasses
import datetime
import fcntl
import json
import math
import os
import re
import ssl
import sys
import time
import http.client
import urllib.parse

CLOSED, OPEN, HALF_OPEN = 'closed', 'open', 'half_open'
STATES = (CLOSED, OPEN, HALF_OPEN)
SERVING = (CLOSED, HALF_OPEN)

DEFAULTS = {
    'window': 30.0,
    'min_requests': 20,
    'threshold': 0.05,
    'cooldown': 30.0,
    'max_cooldown': 300.0,
    'half_open_weight': 1,
    'weight': None,
    'floor': 1,
    'stale': 10.0,
}

METRIC = 'llmops_edge_responses_total'
CLASSES = ('1xx', '2xx', '3xx', '4xx', '5xx')
ERROR_CLASS = '5xx'
# keepalived's misc_dynamic: exit 2+w sets weight w, and the exit status stops at 255.
MAX_WEIGHT = 253
# Samples kept per node: far more than a window of checks needs.
MAX_SAMPLES = 512
# The counters page is small; anything larger is not the edge's.
MAX_BODY = 1 << 20
# Doubling stops mattering long before this many re-opens.
MAX_STRIKES = 32

_SAMPLE_LINE = re.compile(r'^' + METRIC + r'(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)(?:\s+\S+)?\s*$')
_FAMILY_LINE = re.compile(r'^#\s+(?:HELP|TYPE)\s+' + METRIC + r'\s')
_LABEL = re.compile(r'\s*(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')
# Node and service names become file names: no '/', and no leading '.'.
_NAME = re.compile(r'^[A-Za-z0-9\[][A-Za-z0-9._:@\[\]-]{0,127}$')


class BreakerError(Exception):
    """Bad settings or arguments, or a counter page that is not the edge's."""


# Counters.

def parse_counters(text):
    """(total, errors) from the edge's Prometheus text: all classes 1xx..5xx, and the 5xx class.

    Other metrics, comments and unknown classes are ignored, a missing class counts 0 and series of one class
    are added up. Raises BreakerError when the text has no llmops_edge_responses_total at all (not even its
    HELP or TYPE line) or a value that is not a count.
    """
    counts = dict((name, 0) for name in CLASSES)
    seen = False
    for line in text.splitlines():
        line = line.strip()
        if _FAMILY_LINE.match(line):
            seen = True
            continue
        match = _SAMPLE_LINE.match(line)
        if not match:
            continue
        seen = True
        response_class = _labels(match.group('labels') or '').get('class')
        if response_class in counts:
            counts[response_class] += _count(match.group('value'))
    if not seen:
        raise BreakerError('no %s in the counter page' % METRIC)
    return _number(sum(counts.values())), _number(counts[ERROR_CLASS])


def _labels(text):
    """{'class': '5xx'} from 'class="5xx",listener="vip"'."""
    return dict((name, value) for name, value in _LABEL.findall(text))


def _count(text):
    """A counter value: '12', '1.2e+01'; never negative, NaN or infinite."""
    try:
        value = float(text)
    except ValueError:
        raise BreakerError('%s value %r is not a number' % (METRIC, text)) from None
    if math.isnan(value) or math.isinf(value) or value < 0:
        raise BreakerError('%s value %r is not a count' % (METRIC, text))
    return value


def _number(value):
    """12 for 12.0; a fraction stays a float."""
    return int(value) if float(value).is_integer() else value


# Settings.

def make_settings(overrides=None):
    """DEFAULTS with the given (non-None) values of a dict or dataclass, checked. Raises BreakerError."""
    if dataclasses.is_dataclass(overrides):
        overrides = dataclasses.asdict(overrides)
    result = dict(DEFAULTS)
    for name, value in (overrides or {}).items():
        if name not in DEFAULTS:
            raise BreakerError('unknown setting %s' % name)
        if value is not None:
            result[name] = value
    for name, valid in _CHECKS:
        if not valid(result[name]):
            raise BreakerError('setting %s=%r is out of range' % (name, result[name]))
    if result['max_cooldown'] < result['cooldown']:
        raise BreakerError('setting max_cooldown=%r is below cooldown=%r'
                           % (result['max_cooldown'], result['cooldown']))
    return result


def _positive(value):
    return _is_number(value) and value > 0


def _is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _whole(low, high=None):
    return lambda value: (isinstance(value, int) and not isinstance(value, bool) and value >= low
                          and (high is None or value <= high))


_CHECKS = (
    ('window', _positive),
    ('min_requests', _whole(1)),
    ('threshold', lambda value: _positive(value) and value <= 1),
    ('cooldown', _positive),
    ('max_cooldown', _positive),
    ('half_open_weight', _whole(1, MAX_WEIGHT)),
    ('weight', lambda value: value is None or _whole(0, MAX_WEIGHT)(value)),
    ('floor', _whole(0)),
    ('stale', _positive),
)


# State.

def new_state():
    """The state of a node never checked: closed, no samples."""
    return {
        'state': CLOSED,
        'since': None,
        'samples': [],
        'strikes': 0,
        'cooldown': None,
        'check_ok': True,
        'floor_held': False,
        'updated': None,
        'transitions': dict((name, 0) for name in STATES),
    }


def normalise_state(raw):
    """A well-formed copy of a persisted state; anything unreadable in it is taken from new_state()."""
    state = new_state()
    if not isinstance(raw, dict):
        return state
    if raw.get('state') in STATES:
        state['state'] = raw['state']
    for name in ('since', 'cooldown', 'updated'):
        if _is_number(raw.get(name)):
            state[name] = raw[name]
    if _whole(0)(raw.get('strikes')):
        state['strikes'] = min(raw['strikes'], MAX_STRIKES)
    for name in ('check_ok', 'floor_held'):
        if isinstance(raw.get(name), bool):
            state[name] = raw[name]
    state['samples'] = _samples(raw.get('samples'))
    transitions = raw.get('transitions') if isinstance(raw.get('transitions'), dict) else {}
    for name in STATES:
        if _whole(0)(transitions.get(name)):
            state['transitions'][name] = transitions[name]
    for name in ('node', 'service', 'error'):
        if isinstance(raw.get(name), str):
            state[name] = raw[name]
    return state


def _samples(raw):
    """[[t, total, errors], ...] in time order, or [] when any entry is not one."""
    if not isinstance(raw, list):
        return []
    samples = []
    for entry in raw:
        if not (isinstance(entry, list) and len(entry) == 3 and all(_is_number(value) for value in entry)):
            return []
        if samples and entry[0] < samples[-1][0]:
            return []
        samples.append(list(entry))
    return samples[-MAX_SAMPLES:]


# Sliding window.

def record_sample(samples, now, sample, window):
    """samples with (now, total, errors) added, restarted on a counter reset or a gap longer than the window."""
    total, errors = sample
    if samples:
        last = samples[-1]
        if total < last[1] or errors < last[2] or now - last[0] > window:
            samples = []
    return prune_samples(samples + [[now, total, errors]], now, window)


def prune_samples(samples, now, window):
    """samples from the window's start edge on, at most MAX_SAMPLES."""
    return samples[_edge_index(samples, now, window):][-MAX_SAMPLES:]


def _edge_index(samples, now, window):
    """Index of the newest sample at or before now - window; 0 (the oldest) while the window fills."""
    edge = 0
    for index, sample in enumerate(samples):
        if sample[0] > now - window:
            break
        edge = index
    return edge


def window_counts(samples, now, window):
    """(requests, errors, seconds) between the window's start edge and the newest sample."""
    if not samples:
        return 0, 0, 0.0
    edge, newest = samples[_edge_index(samples, now, window)], samples[-1]
    return _number(newest[1] - edge[1]), _number(newest[2] - edge[2]), newest[0] - edge[0]


def error_ratio(requests, errors):
    return errors / requests if requests > 0 else 0.0


# Peers and rules.

def serving_peers(peers, now, stale):
    """How many of the peers' states count as serving at now."""
    return sum(1 for peer in peers or () if _serves(peer, now, stale))


def _serves(peer, now, stale):
    """Closed or half open, last check good, updated within stale seconds (not in the future: another boot)."""
    if not isinstance(peer, dict) or not _is_number(peer.get('updated')):
        return False
    age = now - peer['updated']
    return peer.get('state') in SERVING and peer.get('check_ok') is True and 0 <= age <= stale


def trips(counts, settings):
    """Whether the window's traffic opens the breaker: volume enough and the ratio at the threshold."""
    requests, errors, _seconds = counts
    return requests >= settings['min_requests'] and error_ratio(requests, errors) >= settings['threshold']


def clean_window(counts, settings):
    """Whether a half-open node has shown a full window good enough to close."""
    requests, errors, seconds = counts
    if seconds < settings['window']:
        return False
    if requests >= settings['min_requests']:
        return error_ratio(requests, errors) < settings['threshold']
    return errors == 0


def cooldown_for(strikes, settings):
    """Seconds open after the strikes-th consecutive open: cooldown, doubled each time, capped."""
    doublings = max(0, min(strikes, MAX_STRIKES) - 1)
    return min(settings['cooldown'] * 2 ** doublings, settings['max_cooldown'])


def weight_of(state_name, settings):
    """The weight asked of keepalived in a state; None keeps the configured weight."""
    if state_name == OPEN:
        return 0
    if state_name == HALF_OPEN:
        return settings['half_open_weight']
    return settings['weight']


# The state machine.

def step(state, sample, now, settings=None, peers=()):
    """(new_state, decision) after one check at monotonic time now.

    sample is (total, errors) from the counters, or None when they could not be read. peers are the other
    nodes' persisted states. The input state is not changed.
    """
    settings = make_settings(settings)
    state = normalise_state(state)
    previous = state['state']
    _follow_clock(state, now)
    state['updated'] = now
    if sample is None:
        state.update(check_ok=False, floor_held=False)
        counts = window_counts(state['samples'], now, settings['window'])
        return state, _decision(state, previous, counts, 'counters unreadable', settings)
    state['check_ok'] = True
    state['samples'] = record_sample(state['samples'], now, sample, settings['window'])
    counts = window_counts(state['samples'], now, settings['window'])
    peers_serving = serving_peers(peers, now, settings['stale'])
    reason = _RULES[state['state']](state, counts, now, settings, peers_serving)
    return state, _decision(state, previous, counts, reason, settings)


def _follow_clock(state, now):
    """A clock behind the last sample (a reboot, the state kept on disk): samples restart, timers start now."""
    if state['samples'] and now < state['samples'][-1][0]:
        state['samples'] = []
    if state['since'] is not None and state['since'] > now:
        state['since'] = now


def _closed(state, counts, now, settings, peers_serving):
    state['floor_held'] = False
    if not trips(counts, settings):
        return 'window below threshold'
    if peers_serving < settings['floor']:
        state['floor_held'] = True
        return _floor_reason(counts, settings, peers_serving)
    state['strikes'] = 1
    return _enter_open(state, now, settings, _trip_reason(counts, settings))


def _open(state, counts, now, settings, peers_serving):
    state['floor_held'] = False
    if peers_serving < settings['floor']:
        return _enter_half_open(state, now, 'only %d other nodes serve, floor %d' % (peers_serving, settings['floor']))
    if state['since'] is None or state['cooldown'] is None:  # a damaged state: do not keep the node out
        return _enter_half_open(state, now, 'cool-down unknown')
    if now - state['since'] >= state['cooldown']:
        return _enter_half_open(state, now, 'cool-down of %gs over' % state['cooldown'])
    return 'cooling down'


def _half_open(state, counts, now, settings, peers_serving):
    state['floor_held'] = False
    if trips(counts, settings):
        if peers_serving < settings['floor']:
            state['floor_held'] = True
            return _floor_reason(counts, settings, peers_serving)
        state['strikes'] = min(state['strikes'] + 1, MAX_STRIKES)
        return _enter_open(state, now, settings, _trip_reason(counts, settings) + ' while half open')
    if clean_window(counts, settings):
        state.update(state=CLOSED, since=now, strikes=0, cooldown=None)
        state['transitions'][CLOSED] += 1
        return 'clean window of %gs' % counts[2]
    return 'trial window'


_RULES = {CLOSED: _closed, OPEN: _open, HALF_OPEN: _half_open}


def _enter_open(state, now, settings, reason):
    state.update(state=OPEN, since=now, cooldown=cooldown_for(state['strikes'], settings))
    state['transitions'][OPEN] += 1
    return '%s; open for %gs' % (reason, state['cooldown'])


def _enter_half_open(state, now, reason):
    # The trial window starts now: only the current sample is kept.
    state.update(state=HALF_OPEN, since=now, samples=state['samples'][-1:])
    state['transitions'][HALF_OPEN] += 1
    return reason


def _trip_reason(counts, settings):
    requests, errors, _seconds = counts
    return 'error ratio %.4f >= %g over %s requests' % (error_ratio(requests, errors), settings['threshold'], requests)


def _floor_reason(counts, settings, peers_serving):
    return '%s, but only %d other nodes serve, floor %d: held' % (
        _trip_reason(counts, settings), peers_serving, settings['floor'])


def _decision(state, previous, counts, reason, settings):
    requests, errors, seconds = counts
    return {
        'from': previous,
        'state': state['state'],
        'changed': previous != state['state'],
        'up': state['check_ok'],
        'weight': weight_of(state['state'], settings) if state['check_ok'] else 0,
        'floor_held': state['floor_held'],
        'requests': requests,
        'errors': errors,
        'ratio': round(error_ratio(requests, errors), 6),
        'window': round(seconds, 3),
        'reason': reason,
    }


def exit_code(decision):
    """keepalived's misc_dynamic exit status: 1 down, 0 up with the configured weight, 2+w up with weight w."""
    if not decision.get('up'):
        return 1
    weight = decision.get('weight')
    if weight is None:
        return 0
    return 2 + min(max(int(weight), 0), MAX_WEIGHT)


# Reading the counters.

def tls_context(ca=None, cert=None, key=None):
    """Client context: TLS 1.3 only, server verified (against ca when given) with its name or IP, client cert."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    if ca:
        context.load_verify_locations(cafile=ca)
    else:
        context.load_default_certs()
    if cert:
        context.load_cert_chain(cert, key)
    return context


def fetch_counters(url, timeout, context=None):
    """(total, errors) read from url within about timeout seconds; raises on any failure."""
    # http.client, not urllib.request: a third of the import time, which counts on a small director.
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ('http', 'https') or not parts.hostname:
        raise BreakerError('counter URL %r is not http(s)://host[:port]/path' % url)
    deadline = time.monotonic() + timeout
    if parts.scheme == 'https':
        conn = http.client.HTTPSConnection(parts.hostname, parts.port or 443, timeout=timeout,
                                           context=context or ssl.create_default_context())
    else:
        conn = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=timeout)
    try:
        conn.request('GET', (parts.path or '/') + ('?' + parts.query if parts.query else ''),
                     headers={'Accept': 'text/plain'})
        response = conn.getresponse()
        if response.status != 200:
            raise BreakerError('counter page answered HTTP %d' % response.status)
        body = _read_body(response, deadline)
    finally:
        conn.close()
    return parse_counters(body.decode('utf-8', 'replace'))


def _read_body(response, deadline):
    chunks, size = [], 0
    while True:
        if time.monotonic() > deadline:
            raise BreakerError('counter page not read within the timeout')
        chunk = response.read(65536)
        if not chunk:
            return b''.join(chunks)
        size += len(chunk)
        if size > MAX_BODY:
            raise BreakerError('counter page larger than %d bytes' % MAX_BODY)
        chunks.append(chunk)


# Files.

class Paths:
    """Where one node's state, its peers', the lock and the textfile live."""

    def __init__(self, state_dir, service, node, textfile_dir=None):
        for what, name in (('service', service), ('node', node)):
            if not _NAME.match(name or ''):
                raise BreakerError('%s name %r is not a plain name' % (what, name))
        self.service_dir = os.path.join(state_dir, service)
        self.own = os.path.join(self.service_dir, node + '.json')
        self.lock = os.path.join(self.service_dir, '.lock')
        self.textfile = None
        if textfile_dir:
            self.textfile = os.path.join(textfile_dir, 'llmops_breaker_%s_%s.prom' % (service, node))


@contextlib.contextmanager
def locked(path):
    """An exclusive flock on path (created) for the duration of the block."""
    with open(path, 'a', encoding='utf-8') as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def read_json(path):
    """The JSON in path, or None when it is missing or unreadable."""
    try:
        with open(path, encoding='utf-8') as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def read_peers(service_dir, own):
    """The persisted states of the service's other nodes."""
    peers = []
    for name in sorted(os.listdir(service_dir)):
        path = os.path.join(service_dir, name)
        if name.endswith('.json') and not name.startswith('.') and path != own:
            peer = read_json(path)
            if isinstance(peer, dict):
                peers.append(peer)
    return peers


def make_parent(path):
    directory = os.path.dirname(path)
    if directory:
        os.makedirs(directory, exist_ok=True)


def write_atomic(path, text):
    """Write text to path through a temporary file and os.replace: readers see the old or the new file."""
    make_parent(path)
    directory, name = os.path.split(path)
    temporary = os.path.join(directory, '.%s.%d.tmp' % (name, os.getpid()))
    try:
        with open(temporary, 'w', encoding='utf-8') as handle:
            handle.write(text)
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)


def append_line(path, record):
    """Append one JSON line to path (a single write, so parallel checks do not interleave)."""
    if path:
        make_parent(path)
        with open(path, 'a', encoding='utf-8') as handle:
            handle.write(json.dumps(record, sort_keys=True) + '\n')


def wall_clock():
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='milliseconds')


# Prometheus textfile.

_HELP = (
    ('llmops_breaker_state', 'gauge', 'Circuit breaker state of a real server: 1 for the current state.'),
    ('llmops_breaker_transitions_total', 'counter', 'Circuit breaker state changes, by the state entered.'),
    ('llmops_breaker_weight', 'gauge', 'Weight the breaker gives keepalived; -1 keeps the configured weight.'),
    ('llmops_breaker_source_up', 'gauge', 'Whether the last read of the node edge counters succeeded.'),
    ('llmops_breaker_floor_held', 'gauge', 'Whether the breaker would open but the service floor keeps it in.'),
)


def textfile(service, node, state, decision):
    """node_exporter textfile collector text for one node."""
    labels = 'service="%s",node="%s"' % (_escape(service), _escape(node))
    weight = decision['weight']
    values = {
        'llmops_breaker_state': [('state', name, int(state['state'] == name)) for name in STATES],
        'llmops_breaker_transitions_total': [('to', name, state['transitions'][name]) for name in STATES],
        'llmops_breaker_weight': [(None, None, -1 if weight is None else weight)],
        'llmops_breaker_source_up': [(None, None, int(state['check_ok']))],
        'llmops_breaker_floor_held': [(None, None, int(state['floor_held']))],
    }
    lines = []
    for metric, kind, text in _HELP:
        lines += ['# HELP %s %s' % (metric, text), '# TYPE %s %s' % (metric, kind)]
        for label, label_value, value in values[metric]:
            extra = ',%s="%s"' % (label, label_value) if label else ''
            lines.append('%s{%s%s} %s' % (metric, labels, extra, value))
    return '\n'.join(lines) + '\n'


def _escape(value):
    return value.replace('\\', '\\\\').replace('"', '\\"').replace('\n', '\\n')


# Command line.

class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of exiting 2 (which keepalived would read as "up, weight 0")."""

    def error(self, message):
        raise BreakerError('usage: %s' % message)


def build_parser():
    parser = _Parser(description='Error-rate circuit breaker for one LVS real server (keepalived MISC_CHECK, '
                                 'misc_dynamic): exit 0 up, 1 down, 2+w up with weight w.')
    parser.add_argument('--node', required=True, help='the real server, as named in the state files')
    parser.add_argument('--service', required=True, help='the virtual service the node belongs to')
    parser.add_argument('--url', required=True, help='the edge counters, https://<node>:8000/edge/metrics')
    parser.add_argument('--ca', help='CA bundle to verify the edge (https)')
    parser.add_argument('--cert', help='client certificate (https)')
    parser.add_argument('--key', help='client key (https)')
    parser.add_argument('--timeout', type=float, default=2.0, help='seconds to read the counters')
    parser.add_argument('--state-dir', default='/var/lib/llmops-vllm/breaker', help='persisted states')
    parser.add_argument('--log', help='file to append the JSON transition and error lines to')
    parser.add_argument('--textfile-dir', help='node_exporter textfile collector directory')
    parser.add_argument('--window', type=float, help='sliding window, seconds (several delay_loop)')
    parser.add_argument('--min-requests', type=int, help='requests in the window before the ratio counts')
    parser.add_argument('--threshold', type=float, help='error ratio that opens the breaker')
    parser.add_argument('--cooldown', type=float, help='first cool-down, seconds')
    parser.add_argument('--max-cooldown', type=float, help='longest cool-down, seconds')
    parser.add_argument('--half-open-weight', type=int, help='weight while half open')
    parser.add_argument('--weight', type=int, help='weight while closed (default: the configured weight)')
    parser.add_argument('--floor', type=int, help='fewest serving nodes the breaker leaves in the service')
    parser.add_argument('--stale', type=float, help='seconds after which a peer state is ignored')
    return parser


def settings_from(args):
    return make_settings(dict((name, getattr(args, name)) for name in DEFAULTS))


def read_sample(args):
    """((total, errors), None) from the node's edge, or (None, error text)."""
    try:
        context = None
        if args.url.startswith('https://'):
            context = tls_context(args.ca, args.cert, args.key)
        elif not args.url.startswith('http://'):
            raise BreakerError('url %r is neither https:// nor http://' % args.url)
        return fetch_counters(args.url, args.timeout, context), None
    except Exception as exc:  # any failure to read is a failed check, never a crash
        return None, _describe(exc)


def _describe(exc):
    return '%s: %s' % (type(exc).__name__, exc)


def run_check(args, clock=time.monotonic):
    """One check: read, decide under the lock, persist, log. Returns the decision."""
    settings = settings_from(args)
    paths = Paths(args.state_dir, args.service, args.node, args.textfile_dir)
    sample, error = read_sample(args)
    os.makedirs(paths.service_dir, exist_ok=True)
    with locked(paths.lock):
        now = clock()
        old = normalise_state(read_json(paths.own))
        state, decision = step(old, sample, now, settings, read_peers(paths.service_dir, paths.own))
        state.update(node=args.node, service=args.service)
        if error:
            state['error'] = error
        else:
            state.pop('error', None)
        write_atomic(paths.own, json.dumps(state, sort_keys=True))
    decision['error'] = error
    _report(args, paths, old, state, decision)
    return decision


def _report(args, paths, old, state, decision):
    """Log lines, textfile and the decision on stdout. The decision stands: a failure here only goes to stderr."""
    if decision['error']:
        _stderr(_error_record(args.node, args.service, decision['error']))
    records = log_records(args.node, args.service, old, state, decision)
    _best_effort(args, _append_all, args.log, records)
    if paths.textfile:
        _best_effort(args, write_atomic, paths.textfile, textfile(args.service, args.node, state, decision))
    sys.stdout.write(json.dumps(dict(decision, node=args.node, service=args.service), sort_keys=True) + '\n')


def _append_all(path, records):
    for record in records:
        append_line(path, record)


def _best_effort(args, action, *arguments):
    try:
        action(*arguments)
    except Exception as exc:  # reporting never changes keepalived's answer
        _stderr(_error_record(args.node, args.service, _describe(exc)))


def log_records(node, service, old, state, decision):
    """The log lines of one check: a state change, a floor hold beginning, the counters failing or back."""
    records = []
    if decision['changed'] or (decision['floor_held'] and not old['floor_held']):
        records.append(dict(
            time=wall_clock(), event='transition' if decision['changed'] else 'floor_held', node=node,
            service=service, to=decision['state'], requests=decision['requests'], errors=decision['errors'],
            ratio=decision['ratio'], window=decision['window'], reason=decision['reason'],
            weight=decision['weight'], **{'from': decision['from']}))
    if decision['error'] and old['check_ok']:
        records.append(_error_record(node, service, decision['error']))
    elif not decision['error'] and not old['check_ok']:
        records.append(dict(time=wall_clock(), event='source_up', node=node, service=service))
    return records


def _error_record(node, service, error):
    return dict(time=wall_clock(), event='error', node=node, service=service, error=error)


def _stderr(record):
    sys.stderr.write(json.dumps(record, sort_keys=True) + '\n')


def main(argv=None, clock=None):
    """Run one check; always returns an exit status for keepalived, 1 on any error. clock: tests give the time."""
    args = None
    try:
        args = build_parser().parse_args(argv)
        return exit_code(run_check(args, clock or time.monotonic))
    except SystemExit as exc:  # --help
        return 0 if exc.code in (0, None) else 1
    except Exception as exc:  # keepalived gets a status, never a traceback
        record = _error_record(getattr(args, 'node', None), getattr(args, 'service', None), _describe(exc))
        _stderr(record)
        with contextlib.suppress(Exception):
            append_line(getattr(args, 'log', None), record)
        return 1


if __name__ == '__main__':
    raise SystemExit(main())
