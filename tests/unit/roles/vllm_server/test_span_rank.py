# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""roles/vllm_server/files/vllm-span-rank, two real guards on loopback: the command starts only once both ranks
are there, and when one rank's command ends, both guards end (systemd then restarts the instance as a whole)."""

from __future__ import annotations

import pathlib
import signal
import socket
import subprocess
import sys
import time

GUARD = pathlib.Path(__file__).parents[4] / 'roles' / 'vllm_server' / 'files' / 'vllm-span-rank'


def free_port():
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


def guard(rank, port, marker, seconds=300):
    command = [sys.executable, '-I', str(GUARD), '--instance', 'big', '--nnodes', '2', '--node-rank', str(rank),
               '--head', '127.0.0.1:%d' % port, '--', 'sh', '-c', 'touch %s; exec sleep %d' % (marker, seconds)]
    return subprocess.Popen(command, stderr=subprocess.PIPE, text=True)


def wait(check, timeout=15):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.1)
    return False


def test_the_ranks_start_together_and_end_together(tmp_path):
    port = free_port()
    head_marker, rank_marker = tmp_path / 'head', tmp_path / 'rank'
    head = guard(0, port, head_marker)
    try:
        time.sleep(1)
        assert not head_marker.exists() and head.poll() is None  # alone, the head waits
        rank = guard(1, port, rank_marker, seconds=2)  # this rank's command ends after 2 s, as a crash would
        assert wait(lambda: head_marker.exists() and rank_marker.exists())
        assert rank.wait(15) != 0 and head.wait(15) != 0
        assert 'a rank left' in head.stderr.read()
        assert 'vLLM exited' in rank.stderr.read()
    finally:
        for process in (head, rank):
            if process.poll() is None:
                process.kill()


def test_a_rank_waits_for_the_head_and_a_stop_is_clean(tmp_path):
    port = free_port()
    rank = guard(1, port, tmp_path / 'rank')
    try:
        time.sleep(1.5)
        assert rank.poll() is None and not (tmp_path / 'rank').exists()
        head = guard(0, port, tmp_path / 'head')
        assert wait(lambda: (tmp_path / 'head').exists() and (tmp_path / 'rank').exists())
        # systemctl stop: SIGTERM to the guard, which stops its command and exits 0; the other rank then ends.
        head.send_signal(signal.SIGTERM)
        assert head.wait(15) == 0
        assert rank.wait(15) != 0
    finally:
        for process in (rank, head):
            if process.poll() is None:
                process.kill()
