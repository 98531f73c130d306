# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# Note that this module util is **PRIVATE** to the collection. It can change without notice.
# Do not use this from other collections or standalone plugins/modules!

"""Online batch-size tuning of one canary instance: next_step() is the whole policy, pure, over the trials so far.

A trial ran the instance with one candidate max_num_seqs under the benchmark load and recorded what happened:
  {value, status, throughput_rps, p99_s, memory_ratio, preemptions, duration_s}
status: ok (the load ran), oom (the engine ran out of memory), engine_died (the engine died of something else),
error (the load generator or a request failed without the engine dying: a flaky trial).

The seed's policy, made safe:
- Linear growth: from the start value, step by step, while the last trial was accepted and its memory stayed under
  memory_limit (the seed's 70 %).
- Back-off: an OOM or a dead engine puts a ceiling at that value. With an accepted value below it, the search
  stops there; without one, it halves (32 -> 16, the seed's exponential back-off), never below min_value.
- SLO guard: a trial whose p99 is above slo_p99_s is rejected and is a ceiling too (a larger batch only adds
  latency). A trial at or over memory_limit is not chosen either (the headroom is what keeps real traffic from
  running out of memory) and stops the growth.
- Flaky: an error trial is repeated once (retries); failing again, it is a ceiling.
- Plateau: growth stops when patience accepted trials in a row improve the best throughput by less than min_gain.
- Budget: at most max_trials trials, and no new trial once time_budget_s is spent (or the next trial, as long as
  the longest so far, would overrun it).

accepted: status ok, p99 within the SLO (when one is set), memory under the limit. The choice is the accepted
trial with the highest throughput (the smaller value on a tie: less memory for the same work); with no accepted
trial, the start value is restored.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

OK, OOM, ENGINE_DIED, ERROR = 'ok', 'oom', 'engine_died', 'error'
STATUSES = (OK, OOM, ENGINE_DIED, ERROR)

DEFAULTS = {
    'step': 8,
    'min_value': 1,
    'max_value': 1024,
    'memory_limit': 0.7,
    'slo_p99_s': None,
    'min_gain': 0.02,
    'patience': 2,
    'retries': 1,
    'max_trials': 12,
    'time_budget_s': None,
}


class AutotuneError(ValueError):
    """The tuning cannot go on as asked; the message names what is wrong and the fix."""


def _number(name, value, low=None, integer=False, optional=False):
    if value is None and optional:
        return None
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or (low is not None and value < low):
        raise AutotuneError('autotune: %s is %r, not %s%s. Fix: set it in the tuning settings'
                            % (name, value, 'an integer' if integer else 'a number',
                               '' if low is None else ' of at least %s' % low))
    return value


def settings_of(settings):
    """The settings with their defaults, checked: each bad one named with its fix."""
    merged = dict(DEFAULTS, **dict(settings or {}))
    _number('start', merged.get('start'), 1, integer=True)
    for name in ('step', 'min_value', 'max_value', 'patience', 'max_trials'):
        _number(name, merged[name], 1, integer=True)
    _number('retries', merged['retries'], 0, integer=True)
    _number('min_gain', merged['min_gain'], 0)
    _number('slo_p99_s', merged['slo_p99_s'], 0, optional=True)
    _number('time_budget_s', merged['time_budget_s'], 0, optional=True)
    if not 0 < _number('memory_limit', merged['memory_limit'], 0) <= 1:
        raise AutotuneError('autotune: memory_limit is %r, not a share above 0 and at most 1. Fix: write 70 %% as 0.7'
                            % merged['memory_limit'])
    if not merged['min_value'] <= merged['start'] <= merged['max_value']:
        bounds = (merged['start'], merged['min_value'], merged['max_value'])
        raise AutotuneError('autotune: the start value %d is outside min_value %d .. max_value %d. Fix: widen the '
                            'bounds or start inside them' % bounds)
    return merged


def _check_trial(index, trial):
    if not isinstance(trial, dict) or trial.get('status') not in STATUSES:
        raise AutotuneError('autotune: trial %d has status %r, not one of %s'
                            % (index + 1, (trial or {}).get('status') if isinstance(trial, dict) else trial,
                               ', '.join(STATUSES)))
    _number('trial %d value' % (index + 1), trial.get('value'), 1, integer=True)
    if trial['status'] == OK:
        _number('trial %d throughput_rps' % (index + 1), trial.get('throughput_rps'), 0)


def verdict(trial, settings):
    """Why a trial cannot be chosen ('' when it can): oom, engine_died, error, slo, memory."""
    if trial['status'] != OK:
        return trial['status']
    slo = settings['slo_p99_s']
    if slo is not None and (trial.get('p99_s') is None or trial['p99_s'] > slo):
        return 'slo'
    if trial.get('memory_ratio') is not None and trial['memory_ratio'] >= settings['memory_limit']:
        return 'memory'
    return ''


def _best(trials, settings):
    accepted = [t for t in trials if not verdict(t, settings)]
    if not accepted:
        return None
    return max(accepted, key=lambda t: (t['throughput_rps'], -t['value']))


def _ceiling(trials, settings):
    """The lowest value that must not be tried again: an OOM, a dead engine, an SLO breach, a repeated error."""
    ceilings = []
    for index, trial in enumerate(trials):
        reason = verdict(trial, settings)
        if reason in (OOM, ENGINE_DIED, 'slo'):
            ceilings.append(trial['value'])
        elif reason == ERROR:
            errors = sum(1 for t in trials[:index + 1] if t['value'] == trial['value'] and t['status'] == ERROR)
            if errors > settings['retries']:
                ceilings.append(trial['value'])
    return min(ceilings) if ceilings else None


def _stop(reason, trials, settings):
    best = _best(trials, settings)
    chosen = best['value'] if best else settings['start']
    return {'action': 'stop', 'reason': reason, 'value': chosen, 'restored': best is None,
            'best': best, 'trials': len(trials)}


def _plateaued(trials, settings):
    """patience accepted growth trials in a row, each adding less than min_gain to the best throughput before it."""
    best, flat = None, 0
    for trial in trials:
        if verdict(trial, settings):
            continue
        if best is not None and trial['value'] > best['value']:
            if trial['throughput_rps'] < best['throughput_rps'] * (1 + settings['min_gain']):
                flat += 1
            else:
                flat = 0
        if best is None or trial['throughput_rps'] > best['throughput_rps']:
            best = trial
    return flat >= settings['patience']


def next_step(trials, settings, elapsed_s=0):
    """What to do after these trials: {'action': 'try', 'value': N} or {'action': 'stop', 'reason', 'value'...}.

    elapsed_s: the seconds the tuning has run (the trials and what was between them).
    """
    settings = settings_of(settings)
    trials = list(trials or [])
    for index, trial in enumerate(trials):
        _check_trial(index, trial)
    if not trials:
        return {'action': 'try', 'value': settings['start'], 'reason': 'start'}

    if len(trials) >= settings['max_trials']:
        return _stop('max_trials', trials, settings)
    budget = settings['time_budget_s']
    longest = max(t.get('duration_s') or 0 for t in trials)
    if budget is not None and elapsed_s + longest > budget:
        return _stop('time_budget', trials, settings)

    last = trials[-1]
    reason = verdict(last, settings)
    ceiling = _ceiling(trials, settings)
    best = _best(trials, settings)
    tried = set(t['value'] for t in trials)

    if reason == ERROR and ceiling != last['value']:
        return {'action': 'try', 'value': last['value'], 'reason': 'retry'}
    if reason in (OOM, ENGINE_DIED, 'slo', ERROR):
        if best is not None and best['value'] < last['value']:
            return _stop('ceiling', trials, settings)
        lower = max(settings['min_value'], last['value'] // 2)
        if lower >= last['value'] or lower in tried:
            return _stop('no_safe_value', trials, settings)
        return {'action': 'try', 'value': lower, 'reason': 'back_off'}
    if reason == 'memory':
        return _stop('memory_limit', trials, settings)
    if _plateaued(trials, settings):
        return _stop('plateau', trials, settings)
    candidate = min(last['value'] + settings['step'], settings['max_value'])
    if ceiling is not None and candidate >= ceiling:
        return _stop('ceiling', trials, settings)
    if candidate in tried or candidate <= last['value']:
        return _stop('max_value' if candidate == settings['max_value'] else 'explored', trials, settings)
    return {'action': 'try', 'value': candidate, 'reason': 'grow'}


def trial_of(value, load, observed, duration_s=None):
    """One trial's record from what it measured.

    load: vllm_benchmark's result, or None when no load ran (the instance never became ready).
    observed: ready (it completed a request after the restart), oom (an out-of-memory signature or kill in the
    trial's journal), engine_died (the unit restarted or the engine-died signature), kv_cache_peak (the highest
    vllm:kv_cache_usage_perc seen under the load, 0-1), preemptions (vllm:num_preemptions_total's increase),
    rss_peak_bytes (CPU), gpu_memory_used_ratio (NVML, the instance's GPUs).
    memory_ratio, what the policy's memory limit reads, is the KV-cache peak: vLLM reserves its GPU memory up front,
    so the KV cache's use is what grows with the batch on GPUs and CPUs alike.
    """
    observed = dict(observed or {})
    load = dict(load or {})
    if observed.get('oom'):
        status = OOM
    elif observed.get('engine_died') or not observed.get('ready', True):
        status = ENGINE_DIED
    elif not load or load.get('skipped') or load.get('errors') or not load.get('succeeded'):
        status = ERROR
    else:
        status = OK
    e2e = load.get('e2e_ms') or {}
    trial = {
        'value': value,
        'status': status,
        'throughput_rps': load.get('throughput_rps') if status == OK else None,
        'tokens_per_s': load.get('tokens_per_s'),
        'p99_s': e2e['p99'] / 1000.0 if e2e.get('p99') is not None else None,
        'p50_s': e2e['p50'] / 1000.0 if e2e.get('p50') is not None else None,
        'errors': load.get('errors'),
        'error_kinds': load.get('error_kinds') or {},
        'memory_ratio': observed.get('kv_cache_peak'),
        'preemptions': observed.get('preemptions'),
        'rss_peak_bytes': observed.get('rss_peak_bytes'),
        'gpu_memory_used_ratio': observed.get('gpu_memory_used_ratio'),
        'duration_s': duration_s,
    }
    if status == OK and trial['throughput_rps'] is None:
        trial['throughput_rps'] = 0.0
    return trial


_REASONS = {
    'plateau': 'the throughput stopped improving',
    'ceiling': 'the next candidate is at or above one that failed or broke the SLO',
    'memory_limit': 'the KV cache reached the memory limit',
    'max_trials': 'the trial limit was reached',
    'time_budget': 'the time budget was spent',
    'no_safe_value': 'no smaller candidate is left to back off to',
    'max_value': 'the largest allowed value was reached',
    'explored': 'every candidate on the way was tried',
}


def _cell(value, fmt='%.2f'):
    return '-' if value is None else fmt % value


def report_markdown(tuning):
    """The Markdown report of one tuning: {node, instance, model, start, previous (what it ran before), chosen,
    restored, reason, trials, settings, written (where the value was left), failed (a message when the tuning failed
    and the instance was put back as it was)}.
    """
    t = dict(tuning)
    settings = dict(DEFAULTS, **dict(t.get('settings') or {}))
    lines = ['# Batch-size tuning: %s on %s' % (t.get('instance'), t.get('node')), '',
             '- Model: %s' % t.get('model'),
             '- Tuned: `max_num_seqs`, from %s' % t.get('start')]
    if t.get('failed'):
        lines.append('- **The tuning failed**: %s. The instance runs as before the tuning (max_num_seqs %s).'
                     % (t['failed'], t.get('previous', t.get('start'))))
    elif t.get('restored'):
        lines.append('- **No candidate was accepted**: the instance keeps %s (%s).'
                     % (t.get('start'), _REASONS.get(t.get('reason'), t.get('reason'))))
    else:
        reason = _REASONS.get(t.get('reason'), t.get('reason'))
        lines.append('- **Kept: %s** (stopped: %s).' % (t.get('chosen'), reason))
    if t.get('written'):
        lines.append('- Written to: %s' % t['written'])
    slo = settings.get('slo_p99_s')
    lines += ['- Limits: KV cache under %.0f %%, end-to-end P99 %s; step %s, at most %s trials%s.'
              % (settings['memory_limit'] * 100, '%.3g s' % slo if slo is not None else 'not set', settings['step'],
                 settings['max_trials'], ', %g s' % settings['time_budget_s'] if settings.get('time_budget_s') else ''),
              '', '| # | max_num_seqs | status | req/s | tokens/s | P50 s | P99 s | KV cache peak | preemptions | '
              'RSS peak MiB | why not kept |', '| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |']
    for index, trial in enumerate(t.get('trials') or []):
        rss = trial.get('rss_peak_bytes')
        lines.append('| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |' % (
            index + 1, trial.get('value'), trial.get('status'), _cell(trial.get('throughput_rps'), '%.1f'),
            _cell(trial.get('tokens_per_s'), '%.0f'), _cell(trial.get('p50_s'), '%.3f'),
            _cell(trial.get('p99_s'), '%.3f'),
            _cell(trial['memory_ratio'] * 100 if trial.get('memory_ratio') is not None else None, '%.0f %%'),
            _cell(trial.get('preemptions'), '%.0f'), _cell(rss / 1048576.0 if rss else None, '%.0f'),
            trial.get('verdict') or ('' if trial.get('status') == OK else trial.get('status'))))
    lines.append('')
    return '\n'.join(lines)
