# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The error-rate circuit breaker keepalived runs per real server: parsing, window, state machine, CLI."""

from __future__ import annotations

import dataclasses
import datetime
import http.server
import json
import socket
import ssl
import threading

import pytest

from ansible_collections.llmops.vllm.plugins.module_utils import _breaker
from ansible_collections.llmops.vllm.plugins.module_utils._breaker import (
    BreakerError,
    exit_code,
    make_settings,
    new_state,
    parse_counters,
    step,
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
    assert exit_code(decision) == (2 if state == 'open' else 0)


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
    assert exit_code(node.check(30.0)) == 2  # 29 s into the cool-down: still weight 0
    decision = node.check(31.0)
    assert (decision['state'], decision['weight'], exit_code(decision)) == ('half_open', 1, 3)
    assert node.state['samples'] == [[31.0, 100, 50]]  # the trial window starts here
    assert node.check(45.0, requests=10)['state'] == 'half_open'
    assert node.check(60.0, requests=10)['state'] == 'half_open'  # 29 s: not yet a full window
    decision = node.check(61.0, requests=5)
    assert (decision['state'], decision['reason'], exit_code(decision)) == ('closed', 'clean window of 30s', 102)
    assert node.state['strikes'] == 0 and node.state['transitions'] == {'closed': 1, 'open': 1, 'half_open': 1}


def test_closed_without_a_weight_keeps_keepalived_s_configured_weight():
    node = opened(Node())
    node.check(31.0)
    decision = node.check(61.0, requests=40)
    assert (decision['state'], decision['weight'], exit_code(decision)) == ('closed', None, 0)


def test_half_open_weight_is_a_setting():
    node = opened(Node(half_open_weight=10))
    assert exit_code(node.check(31.0)) == 12


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
    assert (decision['state'], decision['floor_held'], exit_code(decision)) == ('closed', True, 0)
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
    assert exit_code(decision) == 3


def test_a_half_open_node_that_would_reopen_is_held_by_the_floor():
    node = opened(Node())
    node.check(31.0)
    decision = node.check(34.0, requests=100, errors=100, peers=[])
    assert (decision['state'], decision['floor_held'], exit_code(decision)) == ('half_open', True, 3)


# A failed read of the counters.

def test_unreadable_counters_fail_the_check_and_keep_the_breaker_state():
    node = opened(Node())
    decision = node.check_sample(5.0, None)
    assert (decision['state'], decision['up'], exit_code(decision)) == ('open', False, 1)
    assert node.state['check_ok'] is False and node.state['updated'] == 5.0
    assert node.check(6.0)['up'] is True and node.state['check_ok'] is True


def test_a_closed_node_with_unreadable_counters_is_down_and_not_serving_for_its_peers():
    node = Node()
    node.check(0.0)
    state, decision = step(node.state, None, 3.0, SETTINGS, [peer(3.0)])
    assert exit_code(decision) == 1
    assert _breaker.serving_peers([state], 3.0, 10.0) == 0


# Exit codes and settings.

@pytest.mark.parametrize('decision, code', [
    ({'up': False, 'weight': 5}, 1),
    ({'up': True, 'weight': None}, 0),
    ({'up': True, 'weight': 0}, 2),
    ({'up': True, 'weight': 1}, 3),
    ({'up': True, 'weight': 100}, 102),
    ({'up': True, 'weight': 253}, 255),
    ({'up': True, 'weight': 1000}, 255),
])
def test_exit_code_follows_misc_dynamic(decision, code):
    assert exit_code(decision) == code


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


# The command line, against local servers.

class _QuietServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        pass  # refused handshakes are what some tests are about


class Edge:
    """A local HTTP(S) server that answers /<node>/edge/metrics with that node's counters."""

    def __init__(self, context=None):
        self.counters = {}
        edge = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                node = self.path.split('/')[1]
                if node not in edge.counters:
                    self.send_error(404)
                    return
                body = page(c2xx=edge.counters[node][0] - edge.counters[node][1], c5xx=edge.counters[node][1])
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


def argv(tmp_path, node, url, *extra):
    return ['--node', node, '--service', '10.20.0.100:8000', '--url', url, '--timeout', '0.5',
            '--state-dir', str(tmp_path / 'state'), '--log', str(tmp_path / 'breaker.log'),
            '--textfile-dir', str(tmp_path / 'textfile')] + list(extra)


def own_state(tmp_path, node):
    return json.loads((tmp_path / 'state' / '10.20.0.100:8000' / (node + '.json')).read_text())


def log_lines(tmp_path):
    path = tmp_path / 'breaker.log'
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def prom(tmp_path, node):
    return (tmp_path / 'textfile' / ('llmops_breaker_10.20.0.100:8000_%s.prom' % node)).read_text()


def check(tmp_path, node, url, now, *extra):
    return _breaker.main(argv(tmp_path, node, url, *extra), clock=lambda: now)


def test_main_end_to_end_over_http(tmp_path, edge, capsys):
    edge.counters = {'a': (0, 0), 'b': (0, 0)}
    both = ('--weight', '100')

    def round_(now, a, b):
        edge.counters['b'], edge.counters['a'] = b, a
        return check(tmp_path, 'b', edge.url('b'), now, *both), check(tmp_path, 'a', edge.url('a'), now, *both)

    assert round_(100.0, (0, 0), (0, 0)) == (102, 102)
    assert round_(103.0, (100, 20), (100, 0)) == (102, 2)
    assert own_state(tmp_path, 'a')['state'] == 'open' and own_state(tmp_path, 'a')['cooldown'] == 30
    [line] = log_lines(tmp_path)
    assert {key: line[key] for key in ('event', 'node', 'service', 'from', 'to', 'requests', 'errors', 'ratio',
                                       'window', 'weight')} == {
        'event': 'transition', 'node': 'a', 'service': '10.20.0.100:8000', 'from': 'closed', 'to': 'open',
        'requests': 100, 'errors': 20, 'ratio': 0.2, 'window': 3.0, 'weight': 0}
    assert line['reason'].startswith('error ratio 0.2000 >= 0.05')
    assert datetime.datetime.fromisoformat(line['time']).tzinfo is not None
    text = prom(tmp_path, 'a')
    assert 'llmops_breaker_state{service="10.20.0.100:8000",node="a",state="open"} 1\n' in text
    assert 'llmops_breaker_state{service="10.20.0.100:8000",node="a",state="closed"} 0\n' in text
    assert 'llmops_breaker_transitions_total{service="10.20.0.100:8000",node="a",to="open"} 1\n' in text
    assert 'llmops_breaker_weight{service="10.20.0.100:8000",node="a"} 0\n' in text
    assert '# TYPE llmops_breaker_transitions_total counter\n' in text

    assert round_(133.0, (100, 20), (200, 0)) == (102, 3)  # half open, weight 1
    assert round_(163.0, (150, 20), (300, 0)) == (102, 102)  # a clean window: closed, full weight
    assert [(line['from'], line['to']) for line in log_lines(tmp_path)] == [
        ('closed', 'open'), ('open', 'half_open'), ('half_open', 'closed')]
    assert 'llmops_breaker_transitions_total{service="10.20.0.100:8000",node="a",to="closed"} 1\n' in prom(
        tmp_path, 'a')
    assert 'llmops_breaker_weight{service="10.20.0.100:8000",node="a"} 100\n' in prom(tmp_path, 'a')
    out = capsys.readouterr()
    assert out.err == ''
    assert json.loads(out.out.splitlines()[-1])['state'] == 'closed'


def test_main_keeps_the_last_serving_node_in(tmp_path, edge):
    edge.counters = {'a': (0, 0)}
    assert check(tmp_path, 'a', edge.url('a'), 100.0) == 0
    edge.counters['a'] = (100, 100)
    assert check(tmp_path, 'a', edge.url('a'), 103.0) == 0
    [line] = log_lines(tmp_path)
    assert (line['event'], line['from'], line['to']) == ('floor_held', 'closed', 'closed')
    assert 'llmops_breaker_floor_held{service="10.20.0.100:8000",node="a"} 1\n' in prom(tmp_path, 'a')
    assert 'llmops_breaker_weight{service="10.20.0.100:8000",node="a"} -1\n' in prom(tmp_path, 'a')


def test_parallel_checks_never_take_the_last_nodes_out_together(tmp_path, edge):
    edge.counters = {'a': (0, 0), 'b': (0, 0)}
    assert check(tmp_path, 'a', edge.url('a'), 100.0) == 0 and check(tmp_path, 'b', edge.url('b'), 100.0) == 0
    edge.counters = {'a': (100, 100), 'b': (100, 100)}
    barrier, codes = threading.Barrier(2), {}

    def run(node):
        barrier.wait()
        codes[node] = check(tmp_path, node, edge.url(node), 103.0)

    threads = [threading.Thread(target=run, args=(node,)) for node in ('a', 'b')]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(codes.values()) == [0, 2]


def assert_failed_check(tmp_path, capsys, code, fragment):
    assert code == 1
    err = capsys.readouterr().err
    assert 'Traceback' not in err
    record = json.loads(err.splitlines()[-1])
    assert record['event'] == 'error' and fragment in record['error'], record
    assert own_state(tmp_path, 'a')['check_ok'] is False
    assert log_lines(tmp_path)[-1]['error'] == record['error']
    assert 'llmops_breaker_source_up{service="10.20.0.100:8000",node="a"} 0\n' in prom(tmp_path, 'a')


def unused_port():
    with socket.socket() as probe:
        probe.bind(('127.0.0.1', 0))
        return probe.getsockname()[1]


def test_main_fails_the_check_when_the_edge_refuses(tmp_path, capsys):
    code = check(tmp_path, 'a', 'http://127.0.0.1:%d/edge/metrics' % unused_port(), 100.0)
    assert_failed_check(tmp_path, capsys, code, 'refused')


def test_main_fails_the_check_when_the_edge_never_answers(tmp_path, capsys):
    with socket.socket() as silent:
        silent.bind(('127.0.0.1', 0))
        silent.listen(1)  # connections wait in the backlog; nothing ever answers
        url = 'http://127.0.0.1:%d/edge/metrics' % silent.getsockname()[1]
        code = check(tmp_path, 'a', url, 100.0, '--timeout', '0.2')
    assert_failed_check(tmp_path, capsys, code, 'timed out')


def test_main_fails_the_check_on_a_page_that_is_not_the_edges(tmp_path, edge, capsys):
    assert_failed_check(tmp_path, capsys, check(tmp_path, 'a', edge.url('nobody'), 100.0), 'answered HTTP 404')


def test_a_failing_source_is_logged_once_and_its_return_too(tmp_path, edge, capsys):
    url = 'http://127.0.0.1:%d/edge/metrics' % unused_port()
    for now in (100.0, 103.0, 106.0):
        assert check(tmp_path, 'a', url, now) == 1
    edge.counters = {'a': (0, 0)}
    assert check(tmp_path, 'a', edge.url('a'), 109.0) == 0
    assert [line['event'] for line in log_lines(tmp_path)] == ['error', 'source_up']
    assert len(capsys.readouterr().err.splitlines()) == 3


def test_an_open_node_whose_source_fails_is_down(tmp_path, edge):
    edge.counters = {'a': (0, 0), 'b': (0, 0)}
    check(tmp_path, 'a', edge.url('a'), 100.0)
    check(tmp_path, 'b', edge.url('b'), 100.0)
    edge.counters['a'] = (100, 100)
    assert check(tmp_path, 'a', edge.url('a'), 103.0) == 2
    del edge.counters['a']
    assert check(tmp_path, 'a', edge.url('a'), 106.0) == 1
    assert own_state(tmp_path, 'a')['state'] == 'open'


@pytest.mark.parametrize('extra, fragment', [
    (['--threshold', 'high'], 'usage: argument --threshold'),
    (['--floor', '-2'], 'floor=-2'),
    (['--bogus'], 'usage: unrecognized arguments'),
])
def test_main_turns_bad_arguments_into_a_failed_check(tmp_path, edge, capsys, extra, fragment):
    edge.counters = {'a': (0, 0)}
    assert check(tmp_path, 'a', edge.url('a'), 100.0, *extra) == 1
    err = capsys.readouterr().err
    assert 'Traceback' not in err and fragment in json.loads(err.splitlines()[-1])['error']


@pytest.mark.parametrize('option, value', [('--node', '../etc'), ('--service', '.hidden'), ('--node', 'a/b')])
def test_main_refuses_names_that_are_not_plain(tmp_path, edge, capsys, option, value):
    args = argv(tmp_path, 'a', edge.url('a'))
    args[args.index(option) + 1] = value
    assert _breaker.main(args, clock=lambda: 1.0) == 1
    assert 'is not a plain name' in capsys.readouterr().err
    assert not (tmp_path / 'state').exists()


def test_main_refuses_other_url_schemes(tmp_path, capsys):
    assert check(tmp_path, 'a', 'ftp://127.0.0.1/edge/metrics', 1.0) == 1
    assert 'neither https:// nor http://' in capsys.readouterr().err


def test_main_help_exits_0(capsys):
    assert _breaker.main(['--help']) == 0
    assert '--half-open-weight' in capsys.readouterr().out


def test_a_broken_log_or_textfile_does_not_change_the_answer(tmp_path, edge, capsys):
    edge.counters = {'a': (0, 0)}
    (tmp_path / 'textfile').write_text('a file where the directory should be')
    (tmp_path / 'breaker.log').mkdir()
    assert check(tmp_path, 'a', edge.url('a'), 1.0, '--floor', '0') == 0
    edge.counters = {'a': (100, 100)}
    assert check(tmp_path, 'a', edge.url('a'), 4.0, '--floor', '0') == 2
    errors = [json.loads(line)['error'] for line in capsys.readouterr().err.splitlines()]
    assert [error.split(':')[0] for error in errors] == ['FileExistsError', 'IsADirectoryError', 'FileExistsError']
    assert own_state(tmp_path, 'a')['state'] == 'open'
    assert own_state(tmp_path, 'a')['check_ok'] is True


def test_main_reads_an_unreadable_own_state_as_new(tmp_path, edge):
    edge.counters = {'a': (0, 0)}
    state_dir = tmp_path / 'state' / '10.20.0.100:8000'
    state_dir.mkdir(parents=True)
    (state_dir / 'a.json').write_text('{"state": "open", "sin')
    assert check(tmp_path, 'a', edge.url('a'), 1.0) == 0
    assert own_state(tmp_path, 'a')['state'] == 'closed'


# The command line over mTLS, with a throwaway fleet PKI.

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


def test_main_end_to_end_over_mtls(tmp_path, pki, tls_edge):
    tls_edge.counters = {'a': (10, 0)}
    tls = ['--ca', pki.path('ca.crt'), '--cert', pki.path('client.crt'), '--key', pki.path('client.key')]
    assert check(tmp_path, 'a', tls_edge.url('a', 'https'), 1.0, *tls) == 0
    assert own_state(tmp_path, 'a')['samples'] == [[1.0, 10, 0]]


@pytest.mark.parametrize('drop, fragment', [
    (('--cert', '--key'), ''),  # the edge wants a client certificate (the failure's wording varies)
    (('--ca',), 'CERTIFICATE_VERIFY_FAILED'),  # the edge is not trusted by the system CAs
])
def test_main_over_tls_without_the_fleet_credentials_fails_the_check(
        tmp_path, pki, tls_edge, capsys, drop, fragment):
    tls_edge.counters = {'a': (10, 0)}
    tls = {'--ca': pki.path('ca.crt'), '--cert': pki.path('client.crt'), '--key': pki.path('client.key')}
    extra = [item for option, value in tls.items() if option not in drop for item in (option, value)]
    assert_failed_check(tmp_path, capsys, check(tmp_path, 'a', tls_edge.url('a', 'https'), 1.0, *extra), fragment)


def test_main_checks_the_servers_ip_against_its_certificate(tmp_path, pki, tls_edge, capsys):
    tls_edge.counters = {'a': (10, 0)}
    tls = ['--ca', pki.path('ca.crt'), '--cert', pki.path('client.crt'), '--key', pki.path('client.key')]
    url = tls_edge.url('a', 'https').replace('127.0.0.1', 'localhost')  # not in the certificate's SANs
    assert_failed_check(tmp_path, capsys, check(tmp_path, 'a', url, 1.0, *tls), 'Hostname mismatch')


def test_main_refuses_tls_below_1_3(tmp_path, pki, capsys):
    server = Edge(pki.server_context(ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_2))
    try:
        server.counters = {'a': (10, 0)}
        tls = ['--ca', pki.path('ca.crt'), '--cert', pki.path('client.crt'), '--key', pki.path('client.key')]
        assert_failed_check(tmp_path, capsys, check(tmp_path, 'a', server.url('a', 'https'), 1.0, *tls),
                            'PROTOCOL_VERSION')
    finally:
        server.close()
