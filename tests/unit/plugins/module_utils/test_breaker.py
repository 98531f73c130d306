# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The error-rate circuit breaker beside keepalived: parsing, window, state machine, track files, the service."""

from __future__ import annotations

import dataclasses
import datetime
import http.server
import json
import os
import re
import signal
import socket
import ssl
import threading
import time

import pytest

from ansible_collections.llmops.vllm.plugins.module_utils import _breaker
from ansible_collections.llmops.vllm.plugins.module_utils._breaker import (
    Breaker,
    BreakerError,
    check_config,
    load_config,
    make_settings,
    new_state,
    parse_counters,
    serve,
    step,
    track_value,
    window_counts,
)

SETTINGS = make_settings()


def page(**classes):
    """Edge counter text with the given classes, e.g. page(c2xx=95, c5xx=5)."""
    lines = ['# HELP llmops_edge_responses_total Client responses by status class.',
             '# TYPE llmops_edge_responses_total counter']
    lines += ['llmops_edge_responses_total{class="%s"} %s' % (name[1:], value) for name, value in classes.items()]
    return '\n'.join(lines) + '\n'


def peer(now, state='closed', check_ok=True):
    return {'state': state, 'check_ok': check_ok, 'updated': now}


class Node:
    """One node's breaker driven through step(): counters grow by each call's traffic."""

    def __init__(self, peers=1, **settings):
        self.state, self.total, self.errors = new_state(), 0, 0
        self.settings = dict(SETTINGS, **settings)
        self.peers = peers
        self.decision = None

    def check(self, now, requests=0, errors=0, peers=None):
        self.total, self.errors = self.total + requests, self.errors + errors
        return self.check_sample(now, (self.total, self.errors), peers)

    def check_sample(self, now, sample, peers=None):
        peers = [peer(now)] * self.peers if peers is None else peers
        self.state, self.decision = step(self.state, sample, now, self.settings, peers)
        return self.decision

    @property
    def name(self):
        return self.state['state']

    @property
    def track(self):
        return track_value(self.name, self.settings)


def opened(node, now=0.0):
    """node, opened at now by a burst of errors (cool-down 30 s)."""
    node.check(now)
    node.check(now + 1, requests=100, errors=50)
    assert node.name == 'open'
    return node


# Parsing.

@pytest.mark.parametrize('text, expected', [
    (page(c2xx=95, c5xx=5), (100, 5)),
    (page(c1xx=1, c2xx=10, c3xx=2, c4xx=3, c5xx=4), (20, 4)),
    (page(c2xx='1.2e+01', c5xx='3.0'), (15, 3)),
    (page(c2xx=7), (7, 0)),
    (page(), (0, 0)),
    ('llmops_edge_responses_total{class="5xx"} 2\n', (2, 2)),
    ('llmops_edge_responses_total{class="2xx"} 8 1767225600000\n', (8, 0)),
    ('llmops_edge_responses_total{listener="vip",class="5xx"} 2\n'
     'llmops_edge_responses_total{class="5xx",listener="node"} 3\n', (5, 5)),
    ('# a comment\nnginx_connections_active 12\nllmops_edge_responses_total_created{class="2xx"} 1.7e9\n'
     'llmops_edge_probe_responses_total{class="5xx"} 9\n' + page(c2xx=4, c5xx=1) + '\n\n', (5, 1)),
    (page(c2xx=4, other=99), (4, 0)),
    (page(c2xx=0.5, c5xx=0.5), (1, 0.5)),
])
def test_parse_counters(text, expected):
    assert parse_counters(text) == expected


def test_parse_counters_returns_whole_numbers_as_int():
    total, errors = parse_counters(page(c2xx='1.2e+01', c5xx='3'))
    assert isinstance(total, int) and isinstance(errors, int)


@pytest.mark.parametrize('text, fragment', [
    ('', 'no llmops_edge_responses_total'),
    ('<html>404 Not Found</html>\n', 'no llmops_edge_responses_total'),
    ('nginx_connections_active 12\n', 'no llmops_edge_responses_total'),
    (page(c2xx='many'), 'not a number'),
    (page(c2xx='NaN'), 'not a count'),
    (page(c2xx='+Inf'), 'not a count'),
    (page(c2xx='-1'), 'not a count'),
])
def test_parse_counters_refuses_a_page_that_is_not_the_edges(text, fragment):
    with pytest.raises(BreakerError, match=fragment):
        parse_counters(text)


# Window.

def test_a_sample_exactly_at_now_minus_window_is_the_windows_start():
    samples = [[0.0, 0, 0], [10.0, 100, 10], [25.0, 150, 10], [40.0, 200, 11]]
    assert window_counts(samples, 40.0, 30.0) == (100, 1, 30.0)


def test_errors_fall_out_of_the_window():
    node = Node()
    node.check(0.0)
    node.check(3.0, requests=10, errors=10)  # 10 errors, too few requests to open
    node.check(6.0, requests=5)
    assert node.decision['errors'] == 10 and node.name == 'closed'
    node.check(33.0, requests=5)  # the window starts at the sample of 3 s: the errors are before it
    assert (node.decision['requests'], node.decision['errors']) == (10, 0)
    node.check(37.0, requests=20)  # now it starts at the sample of 6 s
    assert (node.decision['requests'], node.decision['errors'], node.name) == (25, 0, 'closed')


def test_the_window_is_partial_until_it_fills():
    assert window_counts([[5.0, 10, 1], [8.0, 30, 2]], 8.0, 30.0) == (20, 1, 3.0)
    assert window_counts([[5.0, 10, 1]], 5.0, 30.0) == (0, 0, 0.0)
    assert window_counts([], 5.0, 30.0) == (0, 0, 0.0)


def test_samples_before_the_windows_start_are_dropped_and_the_list_is_bounded():
    node = Node()
    for second in range(0, 100, 2):
        node.check(float(second), requests=1)
    assert [sample[0] for sample in node.state['samples']][:2] == [68.0, 70.0]
    samples = [[float(index) / 1000, index, 0] for index in range(2000)]
    assert len(_breaker.record_sample(samples, 2.0, (2000, 0), 30.0)) == _breaker.MAX_SAMPLES


# Opening: volume and threshold.

@pytest.mark.parametrize('requests, errors, state', [
    (19, 19, 'closed'),  # every request failed, but too few of them
    (20, 1, 'open'),     # 5 % of the minimum volume
    (100, 10, 'open'),   # 10 %
    (100, 2, 'closed'),  # 2 %
    (100, 5, 'open'),    # exactly the threshold
    (1000, 49, 'closed'),
    (60, 3, 'open'),
])
def test_the_breaker_opens_at_the_threshold_with_enough_volume(requests, errors, state):
    node = Node()
    node.check(0.0)
    decision = node.check(3.0, requests=requests, errors=errors)
    assert decision['state'] == state
    assert decision['weight'] == (0 if state == 'open' else None)


def test_the_threshold_and_volume_are_settings():
    node = Node(threshold=0.2, min_requests=5)
    node.check(0.0)
    assert node.check(1.0, requests=10, errors=1)['state'] == 'closed'
    assert node.check(2.0, requests=5, errors=4)['state'] == 'open'


def test_opening_says_why():
    node = Node()
    node.check(0.0)
    decision = node.check(3.0, requests=100, errors=10)
    assert decision == {
        'from': 'closed', 'state': 'open', 'changed': True, 'up': True, 'weight': 0, 'floor_held': False,
        'requests': 100, 'errors': 10, 'ratio': 0.1, 'window': 3.0,
        'reason': 'error ratio 0.1000 >= 0.05 over 100 requests; open for 30s'}
    assert node.state['transitions'] == {'closed': 0, 'open': 1, 'half_open': 0}


# Cool-down, half open, closing.

def test_cool_down_then_half_open_with_the_reduced_weight_then_closed_with_full_weight():
    node = opened(Node(weight=100))
    assert (node.check(30.0)['weight'], node.track) == (0, -100)  # 29 s into the cool-down: still weight 0
    decision = node.check(31.0)
    assert (decision['state'], decision['weight'], node.track) == ('half_open', 1, -99)
    assert node.state['samples'] == [[31.0, 100, 50]]  # the trial window starts here
    assert node.check(45.0, requests=10)['state'] == 'half_open'
    assert node.check(60.0, requests=10)['state'] == 'half_open'  # 29 s: not yet a full window
    decision = node.check(61.0, requests=5)
    assert (decision['state'], decision['reason'], decision['weight'], node.track) == (
        'closed', 'clean window of 30s', 100, 0)
    assert node.state['strikes'] == 0 and node.state['transitions'] == {'closed': 1, 'open': 1, 'half_open': 1}


def test_closed_without_a_weight_keeps_keepalived_s_configured_weight():
    node = opened(Node())
    node.check(31.0)
    decision = node.check(61.0, requests=40)
    assert (decision['state'], decision['weight'], node.track) == ('closed', None, 0)


def test_half_open_weight_is_a_setting():
    node = opened(Node(half_open_weight=10, weight=100))
    assert (node.check(31.0)['weight'], node.track) == (10, -90)


@pytest.mark.parametrize('requests, errors, state', [
    (0, 0, 'closed'),       # no traffic at all: nothing against the node
    (5, 0, 'closed'),       # little traffic, no error
    (5, 1, 'half_open'),    # little traffic with an error: not proven, the window slides on
    (100, 4, 'closed'),     # 4 % over enough volume
])
def test_half_open_closes_after_a_full_window_below_the_threshold(requests, errors, state):
    node = opened(Node())
    node.check(31.0)
    node.check(46.0, requests=requests, errors=errors)
    assert node.check(61.0)['state'] == state


def test_half_open_with_a_stray_error_closes_once_the_error_left_the_window():
    node = opened(Node())
    node.check(31.0)
    node.check(35.0, requests=5, errors=1)
    assert node.check(61.0, requests=5)['state'] == 'half_open'
    assert node.check(66.0, requests=5)['state'] == 'closed'


def test_half_open_reopens_with_a_doubled_cool_down_as_soon_as_the_window_trips():
    node = opened(Node())
    node.check(31.0)
    decision = node.check(34.0, requests=20, errors=2)
    assert decision['state'] == 'open' and node.state['cooldown'] == 60
    assert decision['reason'].endswith('while half open; open for 60s')
    assert node.check(93.0)['state'] == 'open'
    assert node.check(94.0)['state'] == 'half_open'


def test_half_open_does_not_reopen_on_too_few_requests():
    node = opened(Node())
    node.check(31.0)
    assert node.check(34.0, requests=3, errors=3)['state'] == 'half_open'


def test_the_cool_down_doubles_at_each_reopen_up_to_the_cap():
    node, now, cooldowns = opened(Node()), 1.0, []
    for _round in range(7):
        cooldowns.append(node.state['cooldown'])
        now += node.state['cooldown']
        assert node.check(now)['state'] == 'half_open'
        now += 1
        assert node.check(now, requests=20, errors=20)['state'] == 'open'
    assert cooldowns == [30, 60, 120, 240, 300, 300, 300]


def test_a_clean_close_resets_the_cool_down():
    node = opened(Node())
    node.check(31.0)
    node.check(32.0, requests=20, errors=20)  # re-open: 60 s
    node.check(92.0)
    node.check(122.0)
    assert node.name == 'closed'
    node.check(123.0, requests=20, errors=20)
    assert node.name == 'open' and node.state['cooldown'] == 30


def test_a_flapping_node_is_never_quarantined_for_ever():
    """Bad for an hour, then healthy: it is tried at least every max_cooldown and closes once it is good."""
    node = Node(max_cooldown=120)
    longest_open, opened_at, now = 0.0, None, 0.0
    while now < 4000:
        healthy = now >= 3600
        decision = node.check(now, requests=10, errors=0 if healthy else 5)
        if decision['state'] == 'open' and opened_at is None:
            opened_at = now
        if decision['state'] != 'open' and opened_at is not None:
            longest_open, opened_at = max(longest_open, now - opened_at), None
        now += 3
    assert 0 < longest_open <= 120 + 3
    assert node.name == 'closed' and node.state['strikes'] == 0
    assert node.state['transitions']['open'] > 20


def test_the_open_count_is_kept_bounded():
    assert _breaker.cooldown_for(10 ** 6, SETTINGS) == 300


# Clock jumps and counter resets.

def test_a_clock_that_goes_back_restarts_the_samples():
    node = Node()
    node.check(1000.0)
    node.check(1003.0, requests=10, errors=1)
    decision = node.check(5.0, requests=100, errors=4)  # a reboot: the monotonic clock restarted
    assert (decision['requests'], decision['errors'], decision['state']) == (0, 0, 'closed')
    assert node.state['samples'] == [[5.0, 110, 5]]
    assert node.check(8.0, requests=20)['requests'] == 20


def test_an_open_breaker_whose_clock_went_back_cools_down_from_now():
    node = opened(Node(), now=1000.0)
    assert node.check(5.0)['state'] == 'open'
    assert node.state['since'] == 5.0
    assert node.check(34.0)['state'] == 'open'
    assert node.check(35.0)['state'] == 'half_open'


def test_a_gap_longer_than_the_window_lets_the_old_samples_fall_out():
    node = Node()
    node.check(0.0)
    node.check(3.0, requests=10, errors=10)
    decision = node.check(500.0, requests=15)  # the errors and the gap's traffic are too old to judge
    assert (decision['requests'], decision['errors'], decision['state']) == (0, 0, 'closed')
    assert node.check(503.0, requests=20)['requests'] == 20


def test_a_gap_ends_the_cool_down_by_the_clock():
    node = opened(Node())
    assert node.check(600.0)['state'] == 'half_open'


def test_a_counter_reset_restarts_the_samples_instead_of_a_negative_rate():
    node = Node()
    node.check_sample(0.0, (1000, 10))
    decision = node.check_sample(3.0, (40, 2))  # nginx restarted
    assert (decision['requests'], decision['errors'], decision['state']) == (0, 0, 'closed')
    assert node.state['samples'] == [[3.0, 40, 2]]
    assert node.check_sample(6.0, (100, 2))['requests'] == 60


def test_an_error_counter_reset_alone_restarts_the_samples_too():
    node = Node()
    node.check_sample(0.0, (1000, 10))
    assert node.check_sample(3.0, (1100, 0))['requests'] == 0


# The floor.

def test_the_last_serving_node_stays_in():
    node = Node(peers=0)
    node.check(0.0)
    decision = node.check(3.0, requests=100, errors=100)
    assert (decision['state'], decision['floor_held'], decision['weight']) == ('closed', True, None)
    assert 'only 0 other nodes serve, floor 1: held' in decision['reason']
    assert node.check(6.0, requests=100)['floor_held'] is True  # the errors are still in the window
    assert node.check(34.0, requests=100)['floor_held'] is False


@pytest.mark.parametrize('floor, peers, state', [
    (1, ['closed'], 'open'),
    (1, ['half_open'], 'open'),
    (1, ['open'], 'closed'),
    (2, ['closed', 'closed'], 'open'),   # 2 of 3 left serving
    (2, ['closed', 'open'], 'closed'),   # would leave 1
    (2, ['closed'], 'closed'),
    (0, [], 'open'),                     # no floor: even the last node may go
])
def test_the_floor_counts_the_serving_peers(floor, peers, state):
    node = Node(floor=floor)
    node.check(0.0, peers=[peer(0.0, name) for name in peers])
    assert node.check(3.0, requests=100, errors=100, peers=[peer(3.0, name) for name in peers])['state'] == state


@pytest.mark.parametrize('other', [
    peer(0.0, 'closed'),                  # last update 13 s ago: stale
    peer(13.0, 'closed', check_ok=False),  # its counters failed: keepalived has it down
    peer(20.0, 'closed'),                 # updated after now: from before a reboot
    {'state': 'closed', 'check_ok': True},
    {'state': 'closed', 'check_ok': True, 'updated': 'yesterday'},
    'garbage',
])
def test_stale_failed_or_broken_peers_do_not_count(other):
    node = Node()
    node.check(10.0, peers=[])
    assert node.check(13.0, requests=100, errors=100, peers=[other])['floor_held'] is True


def test_a_peer_exactly_stale_seconds_old_still_counts():
    node = Node(stale=5.0)
    node.check(0.0)
    assert node.check(5.0, requests=100, errors=100, peers=[peer(0.0)])['state'] == 'open'


def test_an_open_node_comes_back_early_when_the_service_falls_below_its_floor():
    node = opened(Node())
    decision = node.check(5.0, peers=[peer(5.0, check_ok=False)])
    assert (decision['state'], decision['reason']) == ('half_open', 'only 0 other nodes serve, floor 1')
    assert decision['weight'] == 1


def test_a_half_open_node_that_would_reopen_is_held_by_the_floor():
    node = opened(Node())
    node.check(31.0)
    decision = node.check(34.0, requests=100, errors=100, peers=[])
    assert (decision['state'], decision['floor_held'], decision['weight']) == ('half_open', True, 1)


# A failed read of the counters.

def test_unreadable_counters_fail_the_check_and_keep_the_breaker_state_and_weight():
    node = opened(Node(weight=100))
    decision = node.check_sample(5.0, None)
    assert (decision['state'], decision['up'], decision['weight'], node.track) == ('open', False, 0, -100)
    assert node.state['check_ok'] is False and node.state['updated'] == 5.0
    assert node.check(6.0)['up'] is True and node.state['check_ok'] is True


def test_a_closed_node_with_unreadable_counters_keeps_its_weight_but_does_not_serve_for_its_peers():
    node = Node(weight=100)
    node.check(0.0)
    state, decision = step(node.state, None, 3.0, node.settings, [peer(3.0)])
    assert (decision['state'], decision['up'], decision['weight'], decision['reason']) == (
        'closed', False, 100, 'counters unreadable')
    assert _breaker.serving_peers([state], 3.0, 10.0) == 0


# Track values and settings.

@pytest.mark.parametrize('state, weight, half_open_weight, value', [
    ('closed', 100, 1, 0),
    ('closed', None, 1, 0),      # no weight configured: keepalived's own
    ('open', 100, 1, -100),
    ('open', 253, 1, -253),
    ('open', 1, 1, -1),
    ('half_open', 100, 1, -99),
    ('half_open', 100, 25, -75),
    ('half_open', 100, 100, 0),
    ('half_open', 5, 10, 0),     # never above the full weight
])
def test_track_value_is_what_keepalived_adds_to_the_weight(state, weight, half_open_weight, value):
    settings = make_settings({'weight': weight, 'half_open_weight': half_open_weight})
    assert track_value(state, settings) == value
    if weight is not None:
        assert weight + value == min(weight, _breaker.weight_of(state, settings))


@pytest.mark.parametrize('overrides, fragment', [
    ({'window': 0}, 'window=0'),
    ({'threshold': 1.5}, 'threshold=1.5'),
    ({'min_requests': 0}, 'min_requests=0'),
    ({'half_open_weight': 0}, 'half_open_weight=0'),
    ({'weight': 254}, 'weight=254'),
    ({'floor': -1}, 'floor=-1'),
    ({'cooldown': 60, 'max_cooldown': 30}, 'below cooldown'),
    ({'windows': 30}, 'unknown setting windows'),
])
def test_settings_are_checked(overrides, fragment):
    with pytest.raises(BreakerError, match=fragment):
        make_settings(overrides)


def test_settings_may_be_a_dataclass():
    @dataclasses.dataclass
    class Tuned:
        window: float = 60.0
        floor: int = 2

    assert make_settings(Tuned()) == dict(SETTINGS, window=60.0, floor=2)


def test_a_damaged_state_starts_again_closed():
    assert _breaker.normalise_state({'state': 'ajar', 'samples': [[1, 2]], 'strikes': -3}) == new_state()
    assert _breaker.normalise_state(['not', 'a', 'dict']) == new_state()


def test_an_open_state_without_its_timers_is_not_kept_open():
    state, decision = step({'state': 'open'}, (0, 0), 5.0, SETTINGS, [peer(5.0)])
    assert decision['state'] == 'half_open' and decision['reason'] == 'cool-down unknown'


def test_step_does_not_change_its_input():
    state = new_state()
    before = json.dumps(state, sort_keys=True)
    step(state, (10, 1), 1.0, SETTINGS, [])
    assert json.dumps(state, sort_keys=True) == before


# The service, against local servers.

SERVICE = '10.20.0.100:8000'


class _QuietServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        pass  # refused handshakes are what some tests are about


class Edge:
    """A local HTTP(S) server that answers /<node>/edge/metrics with that node's counters (or its raw page)."""

    def __init__(self, context=None, keepalive=False):
        self.counters, self.pages = {}, {}
        self.connections, self.drop = 0, False
        edge = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = 'HTTP/1.1' if keepalive else 'HTTP/1.0'

            def setup(self):
                super().setup()
                edge.connections += 1

            def do_GET(self):
                # drop: close the connection after answering, without saying so (an edge's keepalive timeout).
                self.close_connection = edge.drop or not keepalive
                node = self.path.split('/')[1]
                if node in edge.pages:
                    body = edge.pages[node]
                elif node in edge.counters:
                    total, errors = edge.counters[node]
                    body = page(c2xx=total - errors, c5xx=errors)
                else:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header('Content-Type', 'text/plain; version=0.0.4')
                self.send_header('Content-Length', str(len(body)))
                self.end_headers()
                self.wfile.write(body.encode())

            def log_message(self, *args):
                pass

        self.server = _QuietServer(('127.0.0.1', 0), Handler)
        if context is not None:
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def url(self, node, scheme='http'):
        return '%s://127.0.0.1:%d/%s/edge/metrics' % (scheme, self.server.server_address[1], node)

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def edge():
    server = Edge()
    yield server
    server.close()


def unused_port():
    with socket.socket() as probe:
        probe.bind(('127.0.0.1', 0))
        return probe.getsockname()[1]


@pytest.fixture
def silent():
    """The URL of a port that accepts connections (into its backlog) and never answers."""
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        sock.listen(8)  # room for every round's connection: each times out reading, none connecting
        yield 'http://127.0.0.1:%d/a/edge/metrics' % sock.getsockname()[1]


class Clock:
    """A monotonic clock the test sets."""

    def __init__(self, now=100.0):
        self.now = now

    def __call__(self):
        return self.now


class Reader:
    """Counters without a network: each node's (total, errors), or the exception its read raises."""

    def __init__(self, **counters):
        self.counters = counters

    def __call__(self, node):
        value = self.counters[node['name']]
        if isinstance(value, Exception):
            raise value
        return value


def raw_config(tmp_path, nodes=('a', 'b'), **overrides):
    """A configuration as the role writes it: one service of weight-100 nodes ({name: url} or names)."""
    if not isinstance(nodes, dict):
        nodes = dict((name, 'http://127.0.0.1:9/%s/edge/metrics' % name) for name in nodes)
    raw = {
        'interval': 1.0,
        'timeout': 0.5,
        'state_dir': str(tmp_path / 'state'),
        'log': str(tmp_path / 'breaker.log'),
        'textfile': str(tmp_path / 'textfile' / 'llmops_breaker.prom'),
        'settings': {'half_open_weight': 25},
        'services': [{'name': SERVICE, 'nodes': [
            {'name': name, 'url': url, 'weight': 100, 'track_file': str(tmp_path / 'track' / name)}
            for name, url in nodes.items()]}],
    }
    raw.update(overrides)
    return raw


def make_breaker(tmp_path, reader=None, nodes=('a', 'b'), now=100.0, **overrides):
    return Breaker(check_config(raw_config(tmp_path, nodes, **overrides)), clock=Clock(now), reader=reader)


def poll(breaker, now):
    """One round at now: the decisions by node."""
    breaker.clock.now = now
    return dict((decision['node'], decision) for decision in breaker.poll())


def tracks(tmp_path):
    """The track files' values by node."""
    directory = tmp_path / 'track'
    return dict((path.name, int(path.read_text())) for path in directory.iterdir()) if directory.exists() else {}


def own_state(tmp_path, node, service=SERVICE):
    return json.loads((tmp_path / 'state' / service / (node + '.json')).read_text())


def log_lines(tmp_path):
    path = tmp_path / 'breaker.log'
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def prom(tmp_path):
    return (tmp_path / 'textfile' / 'llmops_breaker.prom').read_text().splitlines()


def stderr_records(capsys):
    err = capsys.readouterr().err
    assert 'Traceback' not in err
    return [json.loads(line) for line in err.splitlines()]


def test_the_breaker_end_to_end_over_http(tmp_path, edge, capsys):
    edge.counters = {'a': (0, 0), 'b': (0, 0)}
    breaker = make_breaker(tmp_path, nodes={'a': edge.url('a'), 'b': edge.url('b')})

    def round_(now, a, b):
        edge.counters.update(a=a, b=b)
        decisions = poll(breaker, now)
        return [(decisions[name]['state'], decisions[name]['weight'], decisions[name]['track'])
                for name in ('a', 'b')], tracks(tmp_path)

    assert round_(100.0, (0, 0), (0, 0)) == ([('closed', 100, 0), ('closed', 100, 0)], {'a': 0, 'b': 0})
    assert (tmp_path / 'track' / 'a').read_text() == '0\n'
    edge.counters.update(a=(100, 20), b=(100, 0))
    decisions = poll(breaker, 103.0)
    assert decisions['a'] == {
        'from': 'closed', 'state': 'open', 'changed': True, 'up': True, 'weight': 0, 'floor_held': False,
        'requests': 100, 'errors': 20, 'ratio': 0.2, 'window': 3.0,
        'reason': 'error ratio 0.2000 >= 0.05 over 100 requests; open for 30s',
        'node': 'a', 'service': SERVICE, 'error': None, 'track': -100}
    assert (decisions['b']['state'], decisions['b']['track']) == ('closed', 0)
    assert (tmp_path / 'track' / 'a').read_text() == '-100\n' and tracks(tmp_path) == {'a': -100, 'b': 0}
    state = own_state(tmp_path, 'a')
    assert (state['state'], state['cooldown'], state['node'], state['service']) == ('open', 30, 'a', SERVICE)
    assert 'error' not in state and state['samples'][-1] == [103.0, 100, 20]
    [line] = log_lines(tmp_path)
    assert {key: line[key] for key in ('event', 'node', 'service', 'from', 'to', 'requests', 'errors', 'ratio',
                                       'window', 'weight')} == {
        'event': 'transition', 'node': 'a', 'service': SERVICE, 'from': 'closed', 'to': 'open',
        'requests': 100, 'errors': 20, 'ratio': 0.2, 'window': 3.0, 'weight': 0}
    assert line['reason'].startswith('error ratio 0.2000 >= 0.05')
    assert datetime.datetime.fromisoformat(line['time']).tzinfo is not None
    text = prom(tmp_path)
    labels = {name: 'service="%s",node="%s"' % (SERVICE, name) for name in ('a', 'b')}
    for expected in (
            'llmops_breaker_state{%s,state="open"} 1' % labels['a'],
            'llmops_breaker_state{%s,state="closed"} 0' % labels['a'],
            'llmops_breaker_state{%s,state="half_open"} 0' % labels['a'],
            'llmops_breaker_state{%s,state="closed"} 1' % labels['b'],
            'llmops_breaker_transitions_total{%s,to="open"} 1' % labels['a'],
            'llmops_breaker_transitions_total{%s,to="open"} 0' % labels['b'],
            'llmops_breaker_weight{%s} 0' % labels['a'],
            'llmops_breaker_weight{%s} 100' % labels['b'],
            'llmops_breaker_source_up{%s} 1' % labels['a'],
            'llmops_breaker_floor_held{%s} 0' % labels['b'],
            '# TYPE llmops_breaker_transitions_total counter',
            '# TYPE llmops_breaker_last_poll_timestamp_seconds gauge'):
        assert expected in text
    assert len([line for line in text if line.startswith('llmops_breaker_state{')]) == 6
    [stamp] = [line for line in text if line.startswith('llmops_breaker_last_poll_timestamp_seconds ')]
    assert abs(float(stamp.split()[1]) - time.time()) < 60

    assert round_(133.0, (100, 20), (200, 0)) == ([('half_open', 25, -75), ('closed', 100, 0)], {'a': -75, 'b': 0})
    assert round_(163.0, (150, 20), (300, 0)) == ([('closed', 100, 0), ('closed', 100, 0)], {'a': 0, 'b': 0})
    assert [(line['event'], line['node'], line['from'], line['to']) for line in log_lines(tmp_path)] == [
        ('transition', 'a', 'closed', 'open'), ('transition', 'a', 'open', 'half_open'),
        ('transition', 'a', 'half_open', 'closed')]
    text = prom(tmp_path)
    assert 'llmops_breaker_transitions_total{%s,to="closed"} 1' % labels['a'] in text
    assert 'llmops_breaker_weight{%s} 100' % labels['a'] in text
    assert capsys.readouterr().err == ''


# The floor across the service's nodes.

def test_the_floor_keeps_the_last_serving_node_in(tmp_path):
    reader = Reader(a=(0, 0), b=(0, 0))
    breaker = make_breaker(tmp_path, reader)
    poll(breaker, 100.0)
    reader.counters['b'] = (100, 100)
    assert poll(breaker, 103.0)['b']['state'] == 'open'
    reader.counters['a'] = (100, 100)
    a = poll(breaker, 106.0)['a']
    assert (a['state'], a['floor_held'], a['weight'], a['track']) == ('closed', True, 100, 0)
    assert 'only 0 other nodes serve, floor 1: held' in a['reason']
    assert tracks(tmp_path) == {'a': 0, 'b': -100}
    line = log_lines(tmp_path)[-1]
    assert (line['event'], line['node'], line['from'], line['to'], line['weight']) == (
        'floor_held', 'a', 'closed', 'closed', 100)
    assert 'llmops_breaker_floor_held{service="%s",node="a"} 1' % SERVICE in prom(tmp_path)
    reader.counters['a'] = (200, 200)
    assert poll(breaker, 109.0)['a']['floor_held'] is True
    assert len(log_lines(tmp_path)) == 2  # the hold is logged when it begins


def test_two_nodes_failing_at_once_never_both_go_out(tmp_path):
    reader = Reader(a=(0, 0), b=(0, 0))
    breaker = make_breaker(tmp_path, reader)
    poll(breaker, 100.0)
    ever_open = set()
    for round_ in range(1, 100):
        reader.counters = {'a': (100 * round_, 100 * round_), 'b': (100 * round_, 100 * round_)}
        decisions = poll(breaker, 100.0 + 3 * round_)
        out = sorted(name for name, decision in decisions.items() if decision['state'] == 'open')
        assert len(out) <= 1, (round_, decisions)
        assert max(tracks(tmp_path).values()) > -100
        ever_open.update(out)
    assert ever_open == {'a', 'b'}  # each is still tried in turn


def test_with_floor_0_both_nodes_may_go_out(tmp_path):
    reader = Reader(a=(0, 0), b=(0, 0))
    breaker = make_breaker(tmp_path, reader, settings={'floor': 0})
    poll(breaker, 100.0)
    reader.counters = {'a': (100, 100), 'b': (100, 100)}
    poll(breaker, 103.0)
    assert tracks(tmp_path) == {'a': -100, 'b': -100}


def test_a_node_that_cannot_be_read_keeps_its_weight_and_does_not_serve_for_its_peers(tmp_path):
    reader = Reader(a=(0, 0), b=(0, 0))
    breaker = make_breaker(tmp_path, reader)
    poll(breaker, 100.0)
    reader.counters = {'a': OSError('no route to host'), 'b': (100, 100)}
    decisions = poll(breaker, 103.0)
    assert (decisions['a']['up'], decisions['a']['weight'], decisions['a']['track'], decisions['a']['error']) == (
        False, 100, 0, 'OSError: no route to host')
    assert (decisions['b']['state'], decisions['b']['floor_held']) == ('closed', True)
    assert tracks(tmp_path) == {'a': 0, 'b': 0}


def test_a_peer_read_failing_in_the_same_round_does_not_serve_whatever_the_order(tmp_path):
    reader = Reader(a=(0, 0), b=(0, 0))
    breaker = make_breaker(tmp_path, reader)
    poll(breaker, 100.0)
    reader.counters = {'a': (100, 100), 'b': OSError('no route to host')}
    decisions = poll(breaker, 103.0)
    assert (decisions['a']['state'], decisions['a']['floor_held']) == ('closed', True)


def test_an_open_node_whose_source_fails_keeps_weight_0(tmp_path):
    reader = Reader(a=(0, 0), b=(0, 0))
    breaker = make_breaker(tmp_path, reader)
    poll(breaker, 100.0)
    reader.counters['a'] = (100, 100)
    poll(breaker, 103.0)
    reader.counters['a'] = ConnectionResetError('reset')
    for now in (106.0, 140.0):
        a = poll(breaker, now)['a']
        assert (a['state'], a['up'], a['weight'], a['track']) == ('open', False, 0, -100)
    assert tracks(tmp_path) == {'a': -100, 'b': 0}


def test_only_the_nodes_of_the_same_service_are_peers(tmp_path):
    raw = raw_config(tmp_path, ('a',))
    raw['services'].append({'name': '10.20.0.101:8000', 'nodes': [{
        'name': 'b', 'url': 'http://127.0.0.1:9/b', 'weight': 50, 'track_file': str(tmp_path / 'track' / 'b')}]})
    reader = Reader(a=(0, 0), b=(0, 0))
    breaker = Breaker(check_config(raw), clock=Clock(), reader=reader)
    poll(breaker, 100.0)
    reader.counters['a'] = (100, 100)
    decisions = poll(breaker, 103.0)
    assert (decisions['a']['state'], decisions['a']['floor_held']) == ('closed', True)
    assert (decisions['b']['service'], decisions['b']['weight']) == ('10.20.0.101:8000', 50)
    assert own_state(tmp_path, 'b', '10.20.0.101:8000')['samples'] == [[100.0, 0, 0], [103.0, 0, 0]]


# Failed reads.

def assert_failed_read(tmp_path, decision, fragment):
    assert (decision['up'], decision['state'], decision['weight'], decision['track']) == (False, 'closed', 100, 0)
    assert fragment in decision['error'], decision
    assert 'Traceback' not in decision['error']
    state = own_state(tmp_path, decision['node'])
    assert (state['check_ok'], state['error']) == (False, decision['error'])
    [record] = [line for line in log_lines(tmp_path) if line['event'] == 'error']
    assert (record['node'], record['service'], record['error']) == (decision['node'], SERVICE, decision['error'])
    assert 'llmops_breaker_source_up{service="%s",node="%s"} 0' % (SERVICE, decision['node']) in prom(tmp_path)


@pytest.mark.parametrize('source, fragment', [
    ('refused', 'ConnectionRefusedError'),
    ('silent', 'TimeoutError: timed out'),
    ('unknown', 'BreakerError: counter page answered HTTP 404'),
])
def test_a_source_that_fails_is_a_failed_read_logged_once(tmp_path, edge, request, capsys, source, fragment):
    url = {
        'refused': lambda: 'http://127.0.0.1:%d/a/edge/metrics' % unused_port(),
        'silent': lambda: request.getfixturevalue('silent'),
        'unknown': lambda: edge.url('a'),
    }[source]()
    edge.counters = {'b': (0, 0)}
    # 1 s, not less: b's read must not time out on a CPU that other tests keep busy (a second error record).
    breaker = make_breaker(tmp_path, nodes={'a': url, 'b': edge.url('b')}, timeout=1.0)
    for now in (100.0, 103.0, 106.0):
        decisions = poll(breaker, now)
        assert_failed_read(tmp_path, decisions['a'], fragment)
        assert (decisions['b']['up'], decisions['b']['error']) == (True, None)
    assert tracks(tmp_path) == {'a': 0, 'b': 0}
    assert 'llmops_breaker_source_up{service="%s",node="b"} 1' % SERVICE in prom(tmp_path)
    assert capsys.readouterr().err == ''


def test_a_source_that_comes_back_is_logged(tmp_path, edge):
    breaker = make_breaker(tmp_path, nodes={'a': edge.url('a')})
    poll(breaker, 100.0)
    poll(breaker, 103.0)
    edge.counters = {'a': (0, 0)}
    a = poll(breaker, 106.0)['a']
    assert (a['up'], a['error']) == (True, None)
    assert [(line['event'], line['node']) for line in log_lines(tmp_path)] == [('error', 'a'), ('source_up', 'a')]
    assert 'error' not in own_state(tmp_path, 'a') and own_state(tmp_path, 'a')['check_ok'] is True
    assert 'llmops_breaker_source_up{service="%s",node="a"} 1' % SERVICE in prom(tmp_path)


@pytest.mark.parametrize('body, fragment', [
    ('<html>hello</html>\n', 'no llmops_edge_responses_total'),
    (page(c2xx='-1'), 'not a count'),
    ('x' * (_breaker.MAX_BODY + 1), 'larger than'),
])
def test_fetch_counters_refuses_a_page_that_is_not_the_edges(edge, body, fragment):
    edge.pages['a'] = body
    with pytest.raises(BreakerError, match=fragment):
        _breaker.fetch_counters(edge.url('a'), 2.0)


def test_fetch_counters_reads_the_edges_page(edge):
    edge.counters = {'a': (120, 7)}
    assert _breaker.fetch_counters(edge.url('a') + '?x=1', 2.0) == (120, 7)


def test_fetch_counters_refuses_a_url_without_a_host():
    with pytest.raises(BreakerError, match='is not http'):
        _breaker.fetch_counters('http:///edge/metrics', 1.0)


def test_a_reader_that_raises_anything_is_a_failed_read(tmp_path):
    breaker = make_breaker(tmp_path, Reader(a=ValueError('odd'), b=(0, 0)))
    assert poll(breaker, 100.0)['a']['error'] == 'ValueError: odd'


def test_the_nodes_are_read_in_parallel(tmp_path):
    barrier = threading.Barrier(3, timeout=5)

    def reader(node):
        barrier.wait()
        return (0, 0)

    breaker = make_breaker(tmp_path, reader, nodes=('a', 'b', 'c'))
    assert [decision['error'] for decision in breaker.poll()] == [None, None, None]


def test_a_read_that_never_returns_is_a_failed_read_soon_after_the_timeout(tmp_path):
    release = threading.Event()

    def reader(node):
        if node['name'] == 'a':
            release.wait(30)
        return (0, 0)

    breaker = make_breaker(tmp_path, reader, timeout=0.5)  # b answers at once, even on a busy CPU
    started = time.monotonic()
    try:
        decisions = poll(breaker, 100.0)
    finally:
        release.set()
    assert time.monotonic() - started < 5
    assert decisions['a']['error'] == 'BreakerError: no answer within the timeout'
    assert (decisions['a']['weight'], decisions['b']['error']) == (100, None)


# Files.

def test_a_track_file_is_written_only_when_its_value_changes(tmp_path, monkeypatch):
    writes, write_atomic = [], _breaker.write_atomic

    def counting(path, text):
        if os.path.dirname(path) == str(tmp_path / 'track'):
            writes.append((os.path.basename(path), text))
        write_atomic(path, text)

    monkeypatch.setattr(_breaker, 'write_atomic', counting)
    reader = Reader(a=(0, 0), b=(0, 0))
    breaker = make_breaker(tmp_path, reader)

    def written(now, **counters):
        reader.counters.update(counters)
        del writes[:]
        poll(breaker, now)
        return list(writes)

    assert written(100.0) == [('a', '0\n'), ('b', '0\n')]
    assert written(103.0) == []
    assert written(106.0, a=(100, 100)) == [('a', '-100\n')]
    assert written(109.0) == []
    assert written(120.0, a=ConnectionRefusedError('refused')) == []
    assert written(136.0, a=(100, 100)) == [('a', '-75\n')]
    assert written(150.0) == []
    assert written(166.0) == [('a', '0\n')]
    assert written(169.0) == []


def test_track_files_left_by_a_previous_run_are_rewritten_only_when_wrong(tmp_path):
    (tmp_path / 'track').mkdir()
    (tmp_path / 'track' / 'a').write_text('0\n')
    (tmp_path / 'track' / 'b').write_text('-100\n')
    inode = os.stat(tmp_path / 'track' / 'a').st_ino
    poll(make_breaker(tmp_path, Reader(a=(0, 0), b=(0, 0))), 100.0)
    assert tracks(tmp_path) == {'a': 0, 'b': 0}
    assert os.stat(tmp_path / 'track' / 'a').st_ino == inode


def test_a_restart_resumes_an_open_nodes_cool_down(tmp_path):
    reader = Reader(a=(0, 0), b=(0, 0))
    first = make_breaker(tmp_path, reader)
    poll(first, 100.0)
    reader.counters['a'] = (100, 100)
    assert poll(first, 103.0)['a']['state'] == 'open'
    inode = os.stat(tmp_path / 'track' / 'a').st_ino

    second = make_breaker(tmp_path, reader)
    assert second.states[(SERVICE, 'a')]['state'] == 'open'
    for now in range(106, 133, 3):
        a = poll(second, float(now))['a']
        assert (a['from'], a['state'], a['reason'], a['track']) == ('open', 'open', 'cooling down', -100)
    assert os.stat(tmp_path / 'track' / 'a').st_ino == inode
    assert len(log_lines(tmp_path)) == 1
    assert poll(second, 133.0)['a']['state'] == 'half_open'
    assert tracks(tmp_path) == {'a': -75, 'b': 0}
    assert own_state(tmp_path, 'a')['transitions'] == {'closed': 0, 'open': 1, 'half_open': 1}


def test_a_restart_after_a_pause_longer_than_stale_keeps_the_cool_down(tmp_path):
    reader = Reader(a=(0, 0), b=(0, 0))
    first = make_breaker(tmp_path, reader)
    poll(first, 100.0)
    reader.counters['a'] = (100, 100)
    poll(first, 103.0)
    assert poll(make_breaker(tmp_path, reader), 120.0)['a']['state'] == 'open'


def test_an_unreadable_state_file_starts_the_node_again_closed(tmp_path):
    state_dir = tmp_path / 'state' / SERVICE
    state_dir.mkdir(parents=True)
    (state_dir / 'a.json').write_text('{"state": "open", "sin')
    breaker = make_breaker(tmp_path, Reader(a=(0, 0), b=(0, 0)))
    assert breaker.states[(SERVICE, 'a')] == new_state()
    assert poll(breaker, 100.0)['a']['state'] == 'closed'
    assert own_state(tmp_path, 'a')['state'] == 'closed'


def test_a_broken_log_or_textfile_changes_neither_the_decisions_nor_the_track_files(tmp_path, capsys):
    good, bad = tmp_path / 'good', tmp_path / 'bad'
    good.mkdir()
    bad.mkdir()
    (bad / 'textfile').write_text('a file where the directory should be')
    (bad / 'breaker.log').mkdir()
    reader = Reader(a=(0, 0), b=(0, 0))
    breakers = make_breaker(good, reader), make_breaker(bad, reader)
    for now, a in ((100.0, (0, 0)), (103.0, (100, 100)), (133.0, (100, 100))):
        reader.counters['a'] = a
        assert poll(breakers[1], now) == poll(breakers[0], now)
    assert tracks(bad) == tracks(good) == {'a': -75, 'b': 0}
    assert own_state(bad, 'a') == own_state(good, 'a')
    records = stderr_records(capsys)
    assert [record['error'].split(':')[0] for record in records] == [
        'FileExistsError', 'IsADirectoryError', 'FileExistsError', 'IsADirectoryError', 'FileExistsError']
    assert all((record['event'], record['node'], record['service']) == ('error', None, None) for record in records)


def test_a_track_file_that_cannot_be_written_is_said_on_stderr_and_written_in_the_next_round(tmp_path, capsys):
    (tmp_path / 'track').write_text('a file where the directory should be')
    breaker = make_breaker(tmp_path, Reader(a=(0, 0), b=(0, 0)))
    assert [decision['track'] for decision in breaker.poll()] == [0, 0]
    records = stderr_records(capsys)
    assert [(record['node'], record['service'], record['error'].split(':')[0]) for record in records] == [
        ('a', SERVICE, 'FileExistsError'), ('b', SERVICE, 'FileExistsError')]
    assert own_state(tmp_path, 'a')['samples'] == [[100.0, 0, 0]]
    (tmp_path / 'track').unlink()
    poll(breaker, 103.0)
    assert tracks(tmp_path) == {'a': 0, 'b': 0}
    assert capsys.readouterr().err == ''


def test_the_textfile_escapes_its_labels():
    text = _breaker.textfile([('svc', 'a"b\\c\nd', new_state(), {'weight': 7})], 0.0)
    assert 'llmops_breaker_weight{service="svc",node="a\\"b\\\\c\\nd"} 7\n' in text
    assert text.endswith('llmops_breaker_last_poll_timestamp_seconds 0.000\n')


# Configuration.

def node_entry(raw, index=0):
    return raw['services'][0]['nodes'][index]


def test_a_counter_source_keeps_its_connection_and_reconnects_once_when_the_edge_closed_it():
    edge = Edge(keepalive=True)
    try:
        edge.counters = {'a': (10, 1)}
        source = _breaker.CounterSource(edge.url('a'), 2.0)
        assert [source.read() for _round in range(3)] == [(10, 1)] * 3
        assert edge.connections == 1
        edge.drop = True
        assert source.read() == (10, 1)
        edge.drop = False
        assert source.read() == (10, 1) and source.read() == (10, 1)
        assert edge.connections == 2
        del edge.counters['a']
        with pytest.raises(BreakerError, match='HTTP 404'):
            source.read()
        assert source.conn is None
        edge.counters['a'] = (11, 1)
        assert source.read() == (11, 1) and edge.connections == 3
        source.close()
    finally:
        edge.close()


def test_a_counter_source_does_not_retry_a_new_connection():
    source = _breaker.CounterSource('http://127.0.0.1:%d/a/edge/metrics' % unused_port(), 0.5)
    with pytest.raises(ConnectionRefusedError):
        source.read()
    assert source.conn is None


@pytest.mark.parametrize('change, fragment', [
    pytest.param(lambda raw: node_entry(raw).update(url='ftp://127.0.0.1/edge/metrics'),
                 "url 'ftp://127.0.0.1/edge/metrics' is neither https:// nor http://", id='url scheme'),
    pytest.param(lambda raw: node_entry(raw).pop('url'), 'url None is neither', id='no url'),
    pytest.param(lambda raw: node_entry(raw).update(name='../etc'), "node name '../etc' is not a plain name",
                 id='parent node name'),
    pytest.param(lambda raw: node_entry(raw).update(name='a/b'), "node name 'a/b' is not a plain name",
                 id='slash in node name'),
    pytest.param(lambda raw: node_entry(raw).update(name=7), 'node name 7 is not a plain name', id='number name'),
    pytest.param(lambda raw: raw['services'][0].update(name='.hidden'), "service name '.hidden' is not a plain name",
                 id='hidden service name'),
    pytest.param(lambda raw: node_entry(raw, 1).update(name='a'), 'service 10.20.0.100:8000 names a node twice',
                 id='duplicate node'),
    pytest.param(lambda raw: node_entry(raw).update(weight=0), 'weight 0 is not from 1 to 253', id='weight 0'),
    pytest.param(lambda raw: node_entry(raw).update(weight=254), 'weight 254 is not from 1 to 253', id='weight 254'),
    pytest.param(lambda raw: node_entry(raw).update(weight=True), 'weight True is not', id='weight true'),
    pytest.param(lambda raw: node_entry(raw).update(weight='100'), "weight '100' is not", id='weight string'),
    pytest.param(lambda raw: node_entry(raw).update(track_file='track/a'),
                 "track_file 'track/a' is not an absolute path", id='relative track file'),
    pytest.param(lambda raw: raw['services'][0].update(nodes=['a']), 'a node is not an object', id='node string'),
    pytest.param(lambda raw: raw.update(services=[]), 'no services to watch', id='no services'),
    pytest.param(lambda raw: raw.pop('services'), 'no services to watch', id='services missing'),
    pytest.param(lambda raw: raw.update(services=['web']), "service name None is not a plain name",
                 id='service string'),
    pytest.param(lambda raw: raw.update(settings={'threshold': 1.5}), 'setting threshold=1.5 is out of range',
                 id='threshold'),
    pytest.param(lambda raw: raw.update(settings={'min_requests': 0}), 'setting min_requests=0', id='min_requests'),
    pytest.param(lambda raw: raw.update(settings={'cooldown': 60, 'max_cooldown': 30}), 'below cooldown',
                 id='max_cooldown'),
    pytest.param(lambda raw: raw.update(settings={'windows': 30}), 'unknown setting windows', id='unknown setting'),
    pytest.param(lambda raw: raw.update(state_dir='state'), "state_dir='state' is not an absolute path",
                 id='relative state_dir'),
    pytest.param(lambda raw: raw.pop('state_dir'), 'state_dir=None', id='no state_dir'),
    pytest.param(lambda raw: raw.update(interval=0), 'interval=0 is not a positive number of seconds', id='interval'),
    pytest.param(lambda raw: raw.update(timeout='2'), "timeout='2' is not", id='timeout'),
    pytest.param(lambda raw: raw.update(settings=[1]), 'settings is not a JSON object', id='settings list'),
    pytest.param(lambda raw: raw.update(tls='x'), 'tls is not a JSON object', id='tls string'),
    pytest.param(lambda raw: raw.update(tls={'ca': 5}), 'tls.ca=5 is not a path', id='tls ca number'),
    pytest.param(lambda raw: raw.update(services={'a': 1}), 'services is not a JSON list', id='services object'),
    pytest.param(lambda raw: raw.update(log='breaker.log'), "log='breaker.log' is not an absolute path",
                 id='relative log'),
    pytest.param(lambda raw: raw.update(textfile=3), 'textfile=3 is not an absolute path', id='textfile number'),
    pytest.param(lambda raw: raw['services'][0].update(nodes=[]), 'has no nodes', id='service without nodes'),
    pytest.param(lambda raw: raw['services'].append(dict(raw['services'][0])), 'a service is named twice',
                 id='duplicate service'),
])
def test_check_config_refuses_a_bad_configuration(tmp_path, change, fragment):
    raw = raw_config(tmp_path)
    change(raw)
    with pytest.raises(BreakerError, match=re.escape(fragment)):
        check_config(raw)


@pytest.mark.parametrize('raw', [[], 'breaker', None])
def test_check_config_refuses_what_is_not_an_object(raw):
    with pytest.raises(BreakerError, match='the configuration is not a JSON object'):
        check_config(raw)


def test_check_config_fills_the_defaults_and_keeps_only_what_it_knows(tmp_path):
    raw = raw_config(tmp_path)
    del raw['interval'], raw['timeout'], raw['settings'], raw['log'], raw['textfile']
    node_entry(raw)['comment'] = 'ignored'
    config = check_config(raw)
    assert (config['interval'], config['timeout'], config['tls'], config['log'], config['textfile']) == (
        1.0, 2.0, {}, None, None)
    assert config['settings'] == SETTINGS
    assert config['services'][0]['nodes'][0] == {
        'name': 'a', 'url': 'http://127.0.0.1:9/a/edge/metrics', 'weight': 100,
        'track_file': str(tmp_path / 'track' / 'a')}


def test_a_breaker_without_log_or_textfile_writes_neither(tmp_path):
    raw = raw_config(tmp_path)
    del raw['log'], raw['textfile']
    breaker = Breaker(check_config(raw), clock=Clock(), reader=Reader(a=(0, 0), b=(0, 0)))
    poll(breaker, 100.0)
    breaker.reader.counters['a'] = (100, 100)
    assert poll(breaker, 103.0)['a']['state'] == 'open'
    assert sorted(path.name for path in tmp_path.iterdir()) == ['state', 'track']


def test_load_config_reads_the_file(tmp_path):
    path = tmp_path / 'breaker.json'
    path.write_text(json.dumps(raw_config(tmp_path)))
    assert load_config(str(path)) == check_config(raw_config(tmp_path))


@pytest.mark.parametrize('text', [None, '{"interval": ', '[]'])
def test_load_config_names_the_file_it_cannot_use(tmp_path, text):
    path = tmp_path / 'breaker.json'
    if text is not None:
        path.write_text(text)
    with pytest.raises(BreakerError, match='configuration %s: |not a JSON object' % re.escape(str(path))):
        load_config(str(path))


def test_an_http_only_configuration_needs_no_tls_files(tmp_path):
    breaker = make_breaker(tmp_path, tls={'ca': '/nonexistent/ca.crt'})
    assert breaker.context is None


# The service loop.

class Rounds:
    """A breaker whose rounds raise the given exceptions (None: a good round) and that sets stop after the last."""

    def __init__(self, stop, outcomes, clock=None, durations=None):
        self.stop, self.outcomes, self.clock = stop, list(outcomes), clock
        self.durations = list(durations or [0.0] * len(self.outcomes))
        self.calls = 0

    def poll(self):
        self.calls += 1
        if self.clock is not None:
            self.clock.now += self.durations[self.calls - 1]
        if self.calls == len(self.outcomes):
            self.stop.set()
        if self.outcomes[self.calls - 1] is not None:
            raise self.outcomes[self.calls - 1]
        return []


class Stop:
    """A stop event that records the waits."""

    def __init__(self):
        self.flag, self.waits = False, []

    def is_set(self):
        return self.flag

    def set(self):
        self.flag = True

    def wait(self, timeout):
        self.waits.append(timeout)
        return self.flag


def test_serve_keeps_going_after_a_round_that_raises(capsys):
    stop = threading.Event()
    rounds = Rounds(stop, [RuntimeError('boom'), None, None])
    thread = threading.Thread(target=serve, args=(rounds, 0.01, stop), daemon=True)
    thread.start()
    thread.join(10)
    assert not thread.is_alive() and rounds.calls == 3
    [record] = stderr_records(capsys)
    assert (record['event'], record['node'], record['service'], record['error']) == (
        'error', None, None, 'RuntimeError: boom')


def test_serve_waits_the_rest_of_the_interval_and_never_less_than_nothing():
    stop, clock = Stop(), Clock(0.0)
    rounds = Rounds(stop, [None, None, None], clock, durations=[0.25, 1.5, 0.0])
    serve(rounds, 1.0, stop, clock)
    assert (rounds.calls, stop.waits) == (3, [0.75, 0.0, 1.0])


def test_serve_loads_the_certificates_again_before_the_round_after_a_reload():
    stop, reload, events = Stop(), threading.Event(), []

    class Reloading:
        def load_certificates(self):
            events.append('load')

        def poll(self):
            events.append('poll')
            if len(events) == 1:
                reload.set()  # SIGHUP during the first round
            if events.count('poll') == 3:
                stop.set()

    serve(Reloading(), 0.0, stop, reload=reload)
    assert events == ['poll', 'load', 'poll', 'poll'] and not reload.is_set()


def test_load_certificates_replaces_the_context_and_its_connections(tmp_path):
    breaker = make_breaker(tmp_path, Reader(a=(0, 0), b=(0, 0)))
    breaker.sources['https://a'] = object()
    breaker.load_certificates()
    assert breaker.sources == {}


def test_serve_does_nothing_once_stopped():
    stop = threading.Event()
    stop.set()
    rounds = Rounds(stop, [None])
    serve(rounds, 1.0, stop)
    assert rounds.calls == 0


def test_serve_stops_in_the_middle_of_its_wait_when_the_event_is_set(tmp_path):
    breaker = make_breaker(tmp_path, Reader(a=(0, 0), b=(0, 0)))
    stop = threading.Event()
    thread = threading.Thread(target=serve, args=(breaker, 60.0, stop), daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while len(tracks(tmp_path)) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    started = time.monotonic()
    stop.set()
    thread.join(10)
    assert not thread.is_alive() and time.monotonic() - started < 5
    assert tracks(tmp_path) == {'a': 0, 'b': 0}


# The command line.

def write_config(tmp_path, raw):
    path = tmp_path / 'breaker.json'
    path.write_text(json.dumps(raw))
    return str(path)


def test_main_once_end_to_end(tmp_path, edge, capsys):
    edge.counters = {'a': (0, 0), 'b': (5, 0)}
    # Both nodes answer at once; 5 s, not 0.5, so a busy CI runner does not turn b's read into a failed one.
    path = write_config(tmp_path, raw_config(tmp_path, {'a': edge.url('a'), 'b': edge.url('b')}, timeout=5.0))
    assert _breaker.main(['--config', path, '--once']) == 0
    out = capsys.readouterr()
    assert out.err == ''
    decisions = [json.loads(line) for line in out.out.splitlines()]
    assert [(decision['node'], decision['service'], decision['state'], decision['weight'], decision['track'],
             decision['error']) for decision in decisions] == [
        ('a', SERVICE, 'closed', 100, 0, None), ('b', SERVICE, 'closed', 100, 0, None)]
    assert tracks(tmp_path) == {'a': 0, 'b': 0}
    assert own_state(tmp_path, 'b')['samples'][0][1:] == [5, 0]
    assert 'llmops_breaker_source_up{service="%s",node="b"} 1' % SERVICE in prom(tmp_path)

    edge.counters = {'b': (25, 0)}
    assert _breaker.main(['--config', path, '--once']) == 0
    a, b = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert b['error'] is None, b
    assert (a['up'], a['weight'], b['requests']) == (False, 100, 20)  # the second run resumes b's samples
    assert 'answered HTTP 404' in a['error']


@pytest.mark.parametrize('setup, fragment', [
    (lambda tmp_path, raw: None, 'configuration '),
    (lambda tmp_path, raw: (tmp_path / 'breaker.json').write_text('{"interval": '), 'configuration '),
    (lambda tmp_path, raw: write_config(tmp_path, dict(raw, services=[])), 'no services to watch'),
    (lambda tmp_path, raw: write_config(tmp_path, dict(raw, interval=-1)), 'interval=-1'),
    (lambda tmp_path, raw: write_config(tmp_path, dict(
        raw, services=[dict(raw['services'][0], nodes=[dict(node_entry(raw), url='https://127.0.0.1:1/')])],
        tls={'ca': str(tmp_path / 'missing-ca.crt')})), 'FileNotFoundError'),
])
def test_main_with_a_bad_configuration_returns_2(tmp_path, capsys, setup, fragment):
    setup(tmp_path, raw_config(tmp_path))
    assert _breaker.main(['--config', str(tmp_path / 'breaker.json'), '--once']) == 2
    out = capsys.readouterr()
    assert out.out == '' and 'Traceback' not in out.err
    [record] = [json.loads(line) for line in out.err.splitlines()]
    assert (record['event'], record['node'], record['service']) == ('error', None, None)
    assert fragment in record['error'], record
    assert not (tmp_path / 'track').exists() and not (tmp_path / 'state').exists()


def test_main_serves_until_sigterm(tmp_path, monkeypatch):
    handlers, served = {}, []

    def fake_serve(breaker, interval, stop, reload):
        served.append((breaker, interval, stop.is_set(), reload.is_set()))
        handlers[signal.SIGHUP](signal.SIGHUP, None)
        assert reload.is_set()
        handlers[signal.SIGTERM](signal.SIGTERM, None)
        served.append('not reached')

    monkeypatch.setattr(_breaker.signal, 'signal', handlers.__setitem__)
    monkeypatch.setattr(_breaker, 'serve', fake_serve)
    with pytest.raises(SystemExit) as exc:
        _breaker.main(['--config', write_config(tmp_path, raw_config(tmp_path, interval=2.5))])
    assert exc.value.code == 0
    [(breaker, interval, stopped, reloading)] = served
    assert isinstance(breaker, Breaker) and (interval, stopped, reloading) == (2.5, False, False)


def test_main_usage(capsys):
    with pytest.raises(SystemExit) as exc:
        _breaker.main(['--help'])
    assert exc.value.code == 0 and '--once' in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:
        _breaker.main([])
    assert exc.value.code == 2 and '--config' in capsys.readouterr().err


# Reading over mTLS, with a throwaway fleet PKI.

class Pki:
    """A CA, a server certificate for 127.0.0.1 (IP SAN only) and a client certificate, as PEM files."""

    def __init__(self, directory):
        x509 = pytest.importorskip('cryptography.x509')
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        self.x509, self.hashes, self.serialization, self.ec, self.oid = x509, hashes, serialization, ec, NameOID
        self.directory = directory
        self.ca_key = ec.generate_private_key(ec.SECP256R1())
        self.ca = self._certificate('fleet-ca', self.ca_key, None, ca=True)
        self.write('ca.crt', self.ca)
        import ipaddress
        self.server_key = ec.generate_private_key(ec.SECP256R1())
        san = x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address('127.0.0.1'))])
        self.write('server.crt', self._certificate('gpu-node01', self.server_key, san))
        self.write('server.key', self.server_key)
        self.client_key = ec.generate_private_key(ec.SECP256R1())
        self.write('client.crt', self._certificate('lab-lb1', self.client_key, None))
        self.write('client.key', self.client_key)

    def _certificate(self, name, key, san, ca=False):
        x509 = self.x509
        now = datetime.datetime.now(datetime.timezone.utc)
        subject = x509.Name([x509.NameAttribute(self.oid.COMMON_NAME, name)])
        builder = (x509.CertificateBuilder().subject_name(subject)
                   .issuer_name(subject if ca else self.ca.subject).public_key(key.public_key())
                   .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(hours=1))
                   .not_valid_after(now + datetime.timedelta(days=1))
                   .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
        if ca:
            builder = builder.add_extension(x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                key_encipherment=False, data_encipherment=False, key_agreement=False, encipher_only=False,
                decipher_only=False), critical=True)
            builder = builder.add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                                            critical=False)
        else:
            builder = builder.add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                self.ca_key.public_key()), critical=False)
        if san is not None:
            builder = builder.add_extension(san, critical=False)
        return builder.sign(self.ca_key, self.hashes.SHA256())

    def write(self, name, item):
        if isinstance(item, self.x509.Certificate):
            data = item.public_bytes(self.serialization.Encoding.PEM)
        else:
            data = item.private_bytes(self.serialization.Encoding.PEM, self.serialization.PrivateFormat.PKCS8,
                                      self.serialization.NoEncryption())
        (self.directory / name).write_bytes(data)

    def path(self, name):
        return str(self.directory / name)

    def server_context(self, minimum=ssl.TLSVersion.TLSv1_3, maximum=None):
        """The edge's side: TLS 1.3 only, a client certificate from the fleet CA required."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = minimum
        if maximum is not None:
            context.maximum_version = maximum
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(self.path('ca.crt'))
        context.load_cert_chain(self.path('server.crt'), self.path('server.key'))
        return context


@pytest.fixture
def pki(tmp_path):
    directory = tmp_path / 'pki'
    directory.mkdir()
    return Pki(directory)


@pytest.fixture
def tls_edge(pki):
    server = Edge(pki.server_context())
    yield server
    server.close()


def tls_breaker(tmp_path, pki, url, drop=()):
    """A breaker of one node a at url with the fleet's CA and client certificate, less the drop ones."""
    tls = {'ca': pki.path('ca.crt'), 'cert': pki.path('client.crt'), 'key': pki.path('client.key')}
    tls = dict((name, path) for name, path in tls.items() if name not in drop)
    return make_breaker(tmp_path, nodes={'a': url}, tls=tls)


def test_the_breaker_reads_over_mtls(tmp_path, pki, tls_edge):
    tls_edge.counters = {'a': (10, 0)}
    breaker = tls_breaker(tmp_path, pki, tls_edge.url('a', 'https'))
    assert breaker.context.minimum_version == ssl.TLSVersion.TLSv1_3
    assert breaker.context.verify_mode == ssl.CERT_REQUIRED and breaker.context.check_hostname
    a = poll(breaker, 1.0)['a']
    assert (a['up'], a['error']) == (True, None)
    assert own_state(tmp_path, 'a')['samples'] == [[1.0, 10, 0]]


def test_main_once_over_mtls(tmp_path, pki, tls_edge, capsys):
    tls_edge.counters = {'a': (10, 1)}
    tls = {'ca': pki.path('ca.crt'), 'cert': pki.path('client.crt'), 'key': pki.path('client.key')}
    path = write_config(tmp_path, raw_config(tmp_path, {'a': tls_edge.url('a', 'https')}, tls=tls))
    assert _breaker.main(['--config', path, '--once']) == 0
    [decision] = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert (decision['up'], decision['error']) == (True, None)
    assert own_state(tmp_path, 'a')['samples'][0][1:] == [10, 1]


@pytest.mark.parametrize('drop, fragment', [
    (('cert', 'key'), ''),  # the edge wants a client certificate (the failure's wording varies)
    (('ca',), 'CERTIFICATE_VERIFY_FAILED'),  # the edge is not trusted by the system CAs
])
def test_reading_over_tls_without_the_fleet_credentials_fails(tmp_path, pki, tls_edge, drop, fragment):
    tls_edge.counters = {'a': (10, 0)}
    assert_failed_read(tmp_path, poll(tls_breaker(tmp_path, pki, tls_edge.url('a', 'https'), drop), 1.0)['a'],
                       fragment)


def test_reading_over_tls_checks_the_servers_ip_against_its_certificate(tmp_path, pki, tls_edge):
    tls_edge.counters = {'a': (10, 0)}
    url = tls_edge.url('a', 'https').replace('127.0.0.1', 'localhost')  # not in the certificate's SANs
    assert_failed_read(tmp_path, poll(tls_breaker(tmp_path, pki, url), 1.0)['a'], 'Hostname mismatch')


def test_reading_refuses_tls_below_1_3(tmp_path, pki):
    server = Edge(pki.server_context(ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_2))
    try:
        server.counters = {'a': (10, 0)}
        assert_failed_read(tmp_path, poll(tls_breaker(tmp_path, pki, server.url('a', 'https')), 1.0)['a'],
                           'PROTOCOL_VERSION')
    finally:
        server.close()
