# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# Note that this module util is **PRIVATE** to the collection. It can change without notice.
# Do not use this from other collections or standalone plugins/modules!

"""Error-rate circuit breaker of an LVS director's real servers, a service beside keepalived.

One process per director (the lvs_director role's llmops-breaker.service; it is copied there as a standalone
program: standard library only) reads every real server's edge counters each interval
(llmops_edge_responses_total{class="1xx".."5xx"} at https://<node>:8000/edge/metrics, mTLS), steps that node's
breaker and writes the weight change into the node's track file, which keepalived watches (track_file and a
FILE_CHECK with weight 1 on the real server): 0 full weight, -weight for 0, half_open_weight - weight half open.
keepalived never waits for the breaker: a slow or dead breaker leaves the weights as they are, and a missing
track file reads as 0 (full weight).

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
between rounds longer than the window each restart the samples. A failed read of the counters (timeout, refused,
TLS, HTTP status, unparsable) is recorded (check_ok false): the state and the weight are kept, and the node does
not count as serving for its peers.

Peers are the states of the service's other nodes on the same director: one serves when it is closed or
half_open, its last read succeeded and its update is at most stale seconds old.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import argparse
import dataclasses
import datetime
import json
import math
import os
import re
import signal
import ssl
import sys
import threading
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
# The largest weight a real server is given (the lvs_director role's limit).
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
        'weight': weight_of(state['state'], settings),
        'floor_held': state['floor_held'],
        'requests': requests,
        'errors': errors,
        'ratio': round(error_ratio(requests, errors), 6),
        'window': round(seconds, 3),
        'reason': reason,
    }


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
    source = CounterSource(url, timeout, context)
    try:
        return source.read()
    finally:
        source.close()


# A kept-alive connection the edge closed meanwhile: read again once, on a new one.
_GONE = (http.client.RemoteDisconnected, http.client.CannotSendRequest, ConnectionResetError, BrokenPipeError)


class CounterSource:
    """One node's counter page over a kept-alive connection: on a small director a TLS handshake every round
    costs more than the read. Any failure closes the connection; the next read opens a new one."""

    def __init__(self, url, timeout, context=None):
        # http.client, not urllib.request: a third of the import time, which counts on a small director.
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ('http', 'https') or not parts.hostname:
            raise BreakerError('counter URL %r is not http(s)://host[:port]/path' % url)
        self.parts, self.timeout, self.context = parts, timeout, context
        self.path = (parts.path or '/') + ('?' + parts.query if parts.query else '')
        self.conn = None
        self.busy = threading.Lock()

    def read(self):
        if not self.busy.acquire(blocking=False):
            raise BreakerError('the previous read is still running')
        try:
            reused = self.conn is not None
            try:
                return self._get()
            except _GONE:
                self.close()
                if not reused:
                    raise
                return self._get()
            except BaseException:
                self.close()
                raise
        finally:
            self.busy.release()

    def _connect(self):
        parts = self.parts
        if parts.scheme == 'https':
            return http.client.HTTPSConnection(parts.hostname, parts.port or 443, timeout=self.timeout,
                                               context=self.context or ssl.create_default_context())
        return http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=self.timeout)

    def _get(self):
        deadline = time.monotonic() + self.timeout
        if self.conn is None:
            self.conn = self._connect()
        self.conn.request('GET', self.path, headers={'Accept': 'text/plain'})
        response = self.conn.getresponse()
        if response.status != 200:
            raise BreakerError('counter page answered HTTP %d' % response.status)
        body = _read_body(response, deadline)
        if response.will_close:
            self.close()
        return parse_counters(body.decode('utf-8', 'replace'))

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None


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

def read_json(path):
    """The JSON in path, or None when it is missing or unreadable."""
    try:
        with open(path, encoding='utf-8') as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


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


def append_lines(path, records):
    """Append one JSON line per record to path."""
    if path and records:
        make_parent(path)
        with open(path, 'a', encoding='utf-8') as handle:
            handle.write(''.join(json.dumps(record, sort_keys=True) + '\n' for record in records))


def wall_clock():
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='milliseconds')


# What keepalived reads.

def track_value(state_name, settings):
    """The value of a real server's track file: keepalived adds it to the configured weight (FILE_CHECK, weight 1).

    0 while closed, -weight while open (weight 0: no new connections, established ones finish), and
    half_open_weight - weight while half open. A missing file reads as 0: without the breaker, full weight.
    settings['weight'] is the node's configured weight (the service always gives it).
    """
    weight = settings['weight'] or 0
    target = weight_of(state_name, settings)
    return 0 if target is None else min(target, weight) - weight


# Prometheus textfile.

_HELP = (
    ('llmops_breaker_state', 'gauge', 'Circuit breaker state of a real server: 1 for the current state.'),
    ('llmops_breaker_transitions_total', 'counter', 'Circuit breaker state changes, by the state entered.'),
    ('llmops_breaker_weight', 'gauge', 'Weight the breaker gives the real server.'),
    ('llmops_breaker_source_up', 'gauge', 'Whether the last read of the node edge counters succeeded.'),
    ('llmops_breaker_floor_held', 'gauge', 'Whether the breaker would open but the service floor keeps it in.'),
    ('llmops_breaker_last_poll_timestamp_seconds', 'gauge', 'Unix time of the breaker\'s last round.'),
)


def textfile(rows, now_unix):
    """node_exporter textfile collector text: rows are (service, node, state, decision)."""
    values = dict((metric, []) for metric, _kind, _text in _HELP)
    for service, node, state, decision in rows:
        labels = 'service="%s",node="%s"' % (_escape(service), _escape(node))
        for name in STATES:
            values['llmops_breaker_state'].append('{%s,state="%s"} %d' % (labels, name, state['state'] == name))
            values['llmops_breaker_transitions_total'].append(
                '{%s,to="%s"} %d' % (labels, name, state['transitions'][name]))
        values['llmops_breaker_weight'].append('{%s} %s' % (labels, decision['weight']))
        values['llmops_breaker_source_up'].append('{%s} %d' % (labels, state['check_ok']))
        values['llmops_breaker_floor_held'].append('{%s} %d' % (labels, state['floor_held']))
    values['llmops_breaker_last_poll_timestamp_seconds'].append(' %.3f' % now_unix)
    lines = []
    for metric, kind, text in _HELP:
        lines += ['# HELP %s %s' % (metric, text), '# TYPE %s %s' % (metric, kind)]
        lines += [metric + sample for sample in values[metric]]
    return '\n'.join(lines) + '\n'


def _escape(value):
    return value.replace('\\', '\\\\').replace('"', '\\"').replace('\n', '\\n')


# Configuration (written by the lvs_director role from the lvs_plan filter).

def load_config(path):
    """The checked configuration in the JSON file path. Raises BreakerError naming what is wrong."""
    try:
        with open(path, encoding='utf-8') as handle:
            raw = json.load(handle)
    except (OSError, ValueError) as exc:
        raise BreakerError('configuration %s: %s' % (path, exc)) from None
    return check_config(raw)


def check_config(raw):
    if not isinstance(raw, dict):
        raise BreakerError('the configuration is not a JSON object')
    for name, kind in (('settings', dict), ('tls', dict), ('services', list)):
        if not isinstance(raw.get(name) or kind(), kind):
            raise BreakerError('%s is not a JSON %s' % (name, 'object' if kind is dict else 'list'))
    for name in ('log', 'textfile'):
        if raw.get(name) is not None and not (isinstance(raw[name], str) and os.path.isabs(raw[name])):
            raise BreakerError('%s=%r is not an absolute path' % (name, raw[name]))
    for name in ('ca', 'cert', 'key'):
        value = (raw.get('tls') or {}).get(name)
        if value is not None and not isinstance(value, str):
            raise BreakerError('tls.%s=%r is not a path' % (name, value))
    config = {
        'interval': raw.get('interval', 1.0),
        'timeout': raw.get('timeout', 2.0),
        'tls': raw.get('tls') or {},
        'state_dir': raw.get('state_dir'),
        'log': raw.get('log'),
        'textfile': raw.get('textfile'),
        'settings': make_settings(dict(raw.get('settings') or {}, weight=None)),
        'services': [],
    }
    for name in ('interval', 'timeout'):
        if not _positive(config[name]):
            raise BreakerError('%s=%r is not a positive number of seconds' % (name, config[name]))
    if not (isinstance(config['state_dir'], str) and os.path.isabs(config['state_dir'])):
        raise BreakerError('state_dir=%r is not an absolute path' % (config['state_dir'],))
    for service in raw.get('services') or []:
        config['services'].append(_check_service(service))
    if not config['services']:
        raise BreakerError('no services to watch')
    names = [service['name'] for service in config['services']]
    if len(set(names)) != len(names):
        raise BreakerError('a service is named twice: %s' % ', '.join(sorted(names)))
    return config


def _check_service(service):
    name = service.get('name') if isinstance(service, dict) else None
    _plain('service', name)
    nodes = []
    for node in service.get('nodes') or []:
        if not isinstance(node, dict):
            raise BreakerError('service %s: a node is not an object' % name)
        _plain('node', node.get('name'))
        url = node.get('url')
        if not (isinstance(url, str) and url.split('://')[0] in ('http', 'https')):
            raise BreakerError('service %s, node %s: url %r is neither https:// nor http://'
                               % (name, node['name'], url))
        if not _whole(1, MAX_WEIGHT)(node.get('weight')):
            raise BreakerError('service %s, node %s: weight %r is not from 1 to %d'
                               % (name, node['name'], node.get('weight'), MAX_WEIGHT))
        if not (isinstance(node.get('track_file'), str) and os.path.isabs(node['track_file'])):
            raise BreakerError('service %s, node %s: track_file %r is not an absolute path'
                               % (name, node['name'], node.get('track_file')))
        nodes.append(dict((key, node[key]) for key in ('name', 'url', 'weight', 'track_file')))
    if not nodes:
        raise BreakerError('service %s has no nodes' % name)
    if len(set(node['name'] for node in nodes)) != len(nodes):
        raise BreakerError('service %s names a node twice' % name)
    return {'name': name, 'nodes': nodes}


def _plain(what, name):
    if not (isinstance(name, str) and _NAME.match(name)):
        raise BreakerError('%s name %r is not a plain name' % (what, name))


# The service.

class Breaker:
    """Every real server's breaker on this director, one round per poll().

    A round reads all nodes' counters at once (one thread each, bounded by the timeout), steps each node with
    its service's other nodes as peers, and writes what changed: the node's track file (only when its value
    changes), its state (so that a restart resumes the cool-downs), the log lines and the textfile. A node whose
    counters cannot be read keeps its weight (the health checks, not the breaker, decide whether it is alive) and
    does not count as serving for the floor of its peers.
    """

    def __init__(self, config, clock=time.monotonic, reader=None):
        self.config, self.clock = config, clock
        self.settings = config['settings']
        self.reader = reader or self._fetch
        self.context, self.sources = None, {}
        self.load_certificates()
        self.states, self.written = {}, {}
        for service, node in self.nodes():
            key = (service['name'], node['name'])
            self.states[key] = normalise_state(read_json(self.state_path(*key)))
            current = _read_int(node['track_file'])
            if current is not None:
                self.written[node['track_file']] = current

    def load_certificates(self):
        """(Re)load the CA and client certificate files; the next round connects with them (SIGHUP)."""
        if any(node['url'].startswith('https://') for _service, node in self.nodes()):
            tls = self.config['tls']
            self.context = tls_context(tls.get('ca'), tls.get('cert'), tls.get('key'))
        self.sources = {}

    def nodes(self):
        return [(service, node) for service in self.config['services'] for node in service['nodes']]

    def state_path(self, service, node):
        return os.path.join(self.config['state_dir'], service, node + '.json')

    def _fetch(self, node):
        source = self.sources.get(node['url'])
        if source is None:
            source = self.sources[node['url']] = CounterSource(node['url'], self.config['timeout'], self.context)
        return source.read()

    def read_all(self):
        """{(service, node): (sample, error)}, read in parallel."""
        results = {}

        def read(key, node):
            try:
                results[key] = (self.reader(node), None)
            except Exception as exc:  # any failure to read is a failed source, never a crash
                results[key] = (None, _describe(exc))

        threads = []
        for service, node in self.nodes():
            thread = threading.Thread(target=read, args=((service['name'], node['name']), node), daemon=True)
            thread.start()
            threads.append(thread)
        deadline = time.monotonic() + self.config['timeout'] + 1.0
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        for service, node in self.nodes():
            results.setdefault((service['name'], node['name']), (None, 'BreakerError: no answer within the timeout'))
        return results

    def poll(self):
        """One round; returns its decisions (with node, service, track and error)."""
        results = self.read_all()
        now = self.clock()
        rows, records, decisions = [], [], []
        # Peers as of this round, whichever order the nodes are stepped in: a peer not stepped yet counts with
        # this round's read (serving only when it was read), one already stepped with its new state.
        view = dict((key, dict(state, check_ok=results[key][0] is not None, updated=now))
                    for key, state in self.states.items())
        for service, node in self.nodes():
            key = (service['name'], node['name'])
            settings = dict(self.settings, weight=node['weight'])
            peers = [view[(service['name'], other['name'])] for other in service['nodes'] if other is not node]
            sample, error = results[key]
            old = self.states[key]
            state, decision = step(old, sample, now, settings, peers)
            state.update(node=node['name'], service=service['name'])
            if error:
                state['error'] = error
            else:
                state.pop('error', None)
            self.states[key] = view[key] = state
            decision.update(node=node['name'], service=service['name'], error=error,
                            track=track_value(state['state'], settings))
            self._guard(key, self._write_track, node['track_file'], decision['track'])
            self._guard(key, write_atomic, self.state_path(*key), json.dumps(state, sort_keys=True))
            records += log_records(node['name'], service['name'], old, state, decision)
            rows.append((service['name'], node['name'], state, decision))
            decisions.append(decision)
        self._guard(None, append_lines, self.config.get('log'), records)
        if self.config.get('textfile'):
            self._guard(None, write_atomic, self.config['textfile'], textfile(rows, time.time()))
        return decisions

    def _write_track(self, path, value):
        if self.written.get(path) != value:
            write_atomic(path, '%d\n' % value)
            self.written[path] = value

    def _guard(self, key, action, *arguments):
        try:
            action(*arguments)
        except Exception as exc:  # a full disk or a bad directory: said on stderr, the next round tries again
            _stderr(_error_record(key and key[1], key and key[0], _describe(exc)))


def _read_int(path):
    try:
        with open(path, encoding='utf-8') as handle:
            return int(handle.read().strip())
    except (OSError, ValueError):
        return None


def _describe(exc):
    return '%s: %s' % (type(exc).__name__, exc)


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
    sys.stderr.flush()


# Command line.

def build_parser():
    parser = argparse.ArgumentParser(
        description='Error-rate circuit breaker of an LVS director: reads every real server\'s edge counters '
                    'each interval and writes the weight change keepalived reads (FILE_CHECK track files).')
    parser.add_argument('--config', required=True, help='the JSON configuration the lvs_director role writes')
    parser.add_argument('--once', action='store_true', help='one round, its decisions on stdout, then exit')
    parser.add_argument('--check', action='store_true', help='check the configuration only (exit 0 or 2)')
    return parser


def serve(breaker, interval, stop, clock=time.monotonic, reload=None):
    """Rounds every interval seconds until stop is set; a failing round is reported and the next one runs.
    reload: an Event (set by SIGHUP) that makes the next round load the certificates again."""
    while not stop.is_set():
        started = clock()
        try:
            if reload is not None and reload.is_set():
                reload.clear()
                breaker.load_certificates()
            breaker.poll()
        except Exception as exc:
            _stderr(_error_record(None, None, _describe(exc)))
        stop.wait(max(0.0, interval - (clock() - started)))


def main(argv=None):
    args = build_parser().parse_args(argv)
    try:
        config = load_config(args.config)
        if args.check:
            return 0
        breaker = Breaker(config)
    except Exception as exc:
        _stderr(_error_record(None, None, _describe(exc)))
        return 2
    if args.once:
        for decision in breaker.poll():
            sys.stdout.write(json.dumps(decision, sort_keys=True) + '\n')
        return 0
    # SIGTERM ends the process where it is: every file is replaced atomically, so none is left half written.
    signal.signal(signal.SIGTERM, _terminate)
    reload = threading.Event()
    signal.signal(signal.SIGHUP, lambda _signum, _frame: reload.set())
    serve(breaker, config['interval'], threading.Event(), reload=reload)
    return 0


def _terminate(_signum, _frame):
    raise SystemExit(0)


if __name__ == '__main__':
    raise SystemExit(main())
