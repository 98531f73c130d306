# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# Note that this module util is **PRIVATE** to the collection. It can change without notice.
# Do not use this from other collections or standalone plugins/modules!

"""Total cost of ownership: what a node kind costs a year, and what its measured throughput costs.

Costs per node kind (inventory, one currency, units in the names):
  hardware_price (currency, once), depreciation_years (years), power_watts (W, the node's draw under load),
  pue (the data centre's power usage effectiveness, 1 or more; default 1), energy_price_per_kwh (currency/kWh),
  rack_cost_per_month (currency/month), licence_cost_per_year (currency/year), nodes (how many the fleet has).
A year is 365 days (8,760 h, 31,536,000 s).

Per node and year: hardware = hardware_price / depreciation_years; energy = power_watts / 1000 * 8760 * pue *
energy_price_per_kwh; rack = rack_cost_per_month * 12; licence = licence_cost_per_year; total = their sum.

From a benchmark result of that kind (one node's throughput_rps and output tokens_per_s, per model and precision):
  qps_per_10k = throughput_rps / (total / 10,000): requests/s per 10,000 of the currency spent a year (the seed's
  "QPS per 10,000 CNY", on the yearly cost of ownership rather than the purchase price alone);
  qps_per_10k_hardware = throughput_rps / (hardware_price / 10,000): the same on the purchase price;
  cost_per_million_tokens = total / (tokens_per_s * 31,536,000 * utilisation) * 1,000,000, where utilisation is the
  share of the year the node serves at that throughput.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

HOURS_PER_YEAR = 24 * 365
SECONDS_PER_YEAR = HOURS_PER_YEAR * 3600
PER = 10000

_COSTS = ('hardware_price', 'depreciation_years', 'power_watts', 'energy_price_per_kwh', 'rack_cost_per_month',
          'licence_cost_per_year')


class TcoError(ValueError):
    """The cost inputs are not usable; the message names the node kind, the input and the fix."""


def _fail(kind, what, fix):
    raise TcoError('tco: node kind %s: %s. Fix: %s' % (kind, what, fix))


def _amount(kind, name, value, positive=False):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or (positive and value == 0):
        _fail(kind, '%s is %r, not a number %s' % (name, value, 'above 0' if positive else 'of 0 or more'),
              'set %s in llmops_tco_node_kinds (units in the name)' % name)
    return float(value)


def node_cost(kind, costs):
    """One node's yearly cost of kind, by part and in total; the inputs' units checked as far as they can be."""
    if not isinstance(costs, dict):
        _fail(kind, 'its costs are %r, not a mapping' % (costs,), 'give hardware_price, depreciation_years, ...')
    unknown = sorted(set(costs) - set(_COSTS) - {'pue', 'nodes', 'description'})
    if unknown:
        _fail(kind, 'unknown cost input %s' % ', '.join(unknown),
              'use %s, pue and nodes (docs/capacity.md lists the units)' % ', '.join(_COSTS))
    missing = [name for name in _COSTS if name not in costs]
    if missing:
        _fail(kind, 'missing %s' % ', '.join(missing), 'set 0 for a cost the site does not have')
    price = _amount(kind, 'hardware_price', costs['hardware_price'])
    years = _amount(kind, 'depreciation_years', costs['depreciation_years'], positive=True)
    if years > 15:
        _fail(kind, 'depreciation_years is %s: that is years, and servers are written off in 3 to 7' % costs[
            'depreciation_years'], 'give the depreciation period in years, not months')
    watts = _amount(kind, 'power_watts', costs['power_watts'])
    if 0 < watts < 50:
        _fail(kind, 'power_watts is %s: that is watts, and a GPU or CPU server draws hundreds to thousands' % costs[
            'power_watts'], 'give the draw in watts (6.5 kW is 6500)')
    pue = _amount(kind, 'pue', costs.get('pue', 1), positive=True)
    if pue < 1:
        _fail(kind, 'pue is %s, below 1' % costs.get('pue'), "give the hall's PUE (1.0 or more), or leave it out")
    kwh_price = _amount(kind, 'energy_price_per_kwh', costs['energy_price_per_kwh'])
    energy = watts / 1000.0 * HOURS_PER_YEAR * pue * kwh_price
    parts = {
        'hardware': price / years,
        'energy': energy,
        'rack': _amount(kind, 'rack_cost_per_month', costs['rack_cost_per_month']) * 12,
        'licence': _amount(kind, 'licence_cost_per_year', costs['licence_cost_per_year']),
    }
    parts['total'] = sum(parts.values())
    return parts


def tco_report(node_kinds, results, currency='CNY', utilisation=1.0):
    """Cost per node kind, and per benchmark result (kind, model, precision) its QPS per 10,000 and its cost per
    million output tokens; the fleet's yearly cost and cost per million tokens over the results it runs (one per
    node kind: the others carry fleet: false; with more, notes say why there is no fleet figure)."""
    if isinstance(utilisation, bool) or not isinstance(utilisation, (int, float)) or not 0 < utilisation <= 1:
        raise TcoError('tco: utilisation is %r, not a share above 0 and at most 1. Fix: write 60 %% as 0.6'
                       % (utilisation,))
    kinds = dict((kind, node_cost(kind, costs)) for kind, costs in sorted((node_kinds or {}).items()))
    rows = []
    fleet_cost, fleet_tokens = 0.0, 0.0
    counted, notes = set(), []
    for result in results or []:
        kind = result.get('node_kind')
        if kind not in kinds:
            raise TcoError('tco: result %s/%s names node kind %r, which has no costs. Fix: add it to '
                           'llmops_tco_node_kinds, or set node_kind on the benchmark target'
                           % (result.get('model'), result.get('precision'), kind))
        cost = kinds[kind]['total']
        rps = float(result.get('throughput_rps') or 0)
        tokens = float(result.get('tokens_per_s') or 0)
        yearly_tokens = tokens * SECONDS_PER_YEAR * utilisation
        hardware = float(node_kinds[kind]['hardware_price'])
        rows.append({
            'node_kind': kind, 'model': result.get('model'), 'precision': result.get('precision'),
            'throughput_rps': rps, 'tokens_per_s': tokens,
            'qps_per_10k': rps / (cost / PER) if cost else None,
            'qps_per_10k_hardware': rps / (hardware / PER) if hardware else None,
            'cost_per_million_tokens': cost / yearly_tokens * 1e6 if yearly_tokens else None,
        })
        if result.get('fleet', True):
            if kind in counted:
                notes.append('node kind %s has more than one result the fleet runs (%s/%s among them): each row '
                             'above is a node given to that model alone, and the fleet figure is not summed'
                             % (kind, result.get('model'), result.get('precision')))
                continue
            counted.add(kind)
            nodes = int(node_kinds[kind].get('nodes', 1))
            fleet_cost += cost * nodes
            fleet_tokens += yearly_tokens * nodes
    return {
        'currency': currency,
        'per': PER,
        'utilisation': utilisation,
        'node_kinds': kinds,
        'results': rows,
        'fleet': None if notes else {
            'cost_per_year': fleet_cost,
            'tokens_per_year': fleet_tokens,
            'cost_per_million_tokens': fleet_cost / fleet_tokens * 1e6 if fleet_tokens else None,
        },
        'notes': notes,
    }
