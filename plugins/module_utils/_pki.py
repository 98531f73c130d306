# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# Note that this module util is **PRIVATE** to the collection. It can change without notice.
# Do not use this from other collections or standalone plugins/modules!

"""Which certificates the fleet CA issues, to whom, with which subject, SANs and usages.

pki_plan() is the one decision of the pki role for a host: its server certificate (vLLM nodes, for the edge) and
its client certificates (the LB health checker, Prometheus), or, for the controller, the application clients. The
role creates keys where the certificate lives, signs on the controller, and renders nothing it did not get here.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import datetime
import ipaddress
import re

from collections.abc import Mapping

from ansible_collections.llmops.vllm.plugins.module_utils._safe_text import PATH_RULE, safe_path

_NAME = re.compile(r'^[a-z0-9][a-z0-9._-]{0,62}\Z')
_DNS = re.compile(r'^(?=.{1,253}$)(\*\.)?[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}'
                  r'[A-Za-z0-9])?)*$')
_OU = re.compile(r'^[A-Za-z0-9][A-Za-z0-9 ._-]{0,63}\Z')
KEY_ALGORITHMS = {
    'ecdsa-p256': {'type': 'ECC', 'curve': 'secp256r1'},
    'ecdsa-p384': {'type': 'ECC', 'curve': 'secp384r1'},
    'rsa-2048': {'type': 'RSA', 'size': 2048},
    'rsa-3072': {'type': 'RSA', 'size': 3072},
    'rsa-4096': {'type': 'RSA', 'size': 4096},
}
SERVER_OU = 'vllm-edge'
APPLICATION_OU = 'applications'


class PkiPlanError(ValueError):
    """The certificates cannot be issued as asked; the message names the host, the problem and the fix."""


def _fail(host, what, fix):
    raise PkiPlanError('host %s: pki: %s. Fix: %s' % (host or 'this host', what, fix))


def _positive_int(host, name, value, minimum=1):
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        _fail(host, '%s must be an integer >= %d, got %r' % (name, minimum, value), 'correct %s' % name)
    return value


def _ip(host, what, value):
    try:
        return str(ipaddress.ip_address(str(value).strip()))
    except ValueError:
        _fail(host, '%s %r is not an IP address' % (what, value), 'use an IPv4 or IPv6 address such as 10.0.0.10')


def _san(host, entry):
    """A subject alternative name as 'DNS:name' or 'IP:address', checked."""
    kind, sep, value = str(entry).partition(':')
    if not sep or kind not in ('DNS', 'IP'):
        _fail(host, 'pki_server_extra_sans entry %r is neither DNS:<name> nor IP:<address>' % (entry,),
              'write it as DNS:llm.example.com or IP:10.0.0.100')
    if kind == 'IP':
        return 'IP:' + _ip(host, 'pki_server_extra_sans entry', value)
    if not _DNS.match(value):
        _fail(host, 'pki_server_extra_sans entry %r is not a DNS name' % (entry,), 'use a name such as llm.example.com')
    return 'DNS:' + value


def validity(settings, host=None):
    """(validity days, renew-before days) of issued certificates, checked against each other."""
    days = _positive_int(host, 'pki_certificate_validity_days', settings.get('validity_days'))
    renew = _positive_int(host, 'pki_renew_before_days', settings.get('renew_before_days'))
    if renew >= days:
        _fail(host, 'pki_renew_before_days (%d) is not below pki_certificate_validity_days (%d), so every run would '
              'renew every certificate' % (renew, days),
              'make pki_renew_before_days smaller than pki_certificate_validity_days, e.g. 30 and 365')
    return days, renew


def key_algorithm(name, host=None):
    """The openssl_privatekey options of a key algorithm name."""
    if name not in KEY_ALGORITHMS:
        _fail(host, 'pki_key_algorithm %r is not one of %s' % (name, ', '.join(sorted(KEY_ALGORITHMS))),
              'use one of them (ecdsa-p256 is fast and widely supported)')
    return dict(KEY_ALGORITHMS[name])


def _client(host, item, default_ou, where):
    if not isinstance(item, Mapping) or not item.get('name'):
        _fail(host, '%s entry %r has no name' % (where, item), 'give every client a name, e.g. {name: prometheus}')
    name = str(item['name'])
    if not _NAME.match(name):
        _fail(host, '%s entry %r: the name must be lower-case letters, digits, dots, dashes or underscores (at most '
              '63), as it names the files and the certificate' % (where, name),
              'rename it, e.g. %s' % (re.sub(r'[^a-z0-9._-]+', '-', name.lower()).strip('-._') or 'client'))
    ou = str(item.get('ou') or default_ou or '')
    if not ou:
        _fail(host, '%s entry %s has no ou' % (where, name),
              'say what the client is, e.g. {name: prometheus, ou: prometheus}')
    if not _OU.match(ou):
        _fail(host, '%s entry %s: ou %r has characters a certificate subject should not carry' % (where, name, ou),
              'use letters, digits, spaces, dots, dashes or underscores')
    return name, ou


def _certificate(name, kind, common_name, ou, organization, directory, sans, owner=None, group=None):
    return {
        'name': name,
        'kind': kind,
        'common_name': common_name,
        'organizational_unit': ou,
        'organization': organization,
        'subject_alt_name': sans,
        # Node certificates also authenticate as clients: the edge checks itself with its own certificate.
        'extended_key_usage': ['serverAuth', 'clientAuth'] if kind == 'server' else ['clientAuth'],
        'key_path': '%s/%s.key' % (directory, name),
        'certificate_path': '%s/%s.crt' % (directory, name),
        'owner': owner,
        'group': group,
    }


def pki_plan(settings, identity=None, host=None):
    """Return the certificates of one holder, or raise PkiPlanError.

    settings: validity_days, renew_before_days, key_algorithm, key_max_age_days (0: keys live until a revocation),
    organization, directory (where the files go on the holder), server (bool), extra_sans, service_vips,
    service_names, clients ([{name, ou, owner, group}]), application (bool: the controller's application clients,
    common name = client name).
    identity: the host's names and addresses, {'names': [...], 'addresses': [...]} (unused for applications).
    """
    settings, identity = dict(settings or {}), dict(identity or {})
    days, renew = validity(settings, host)
    key = key_algorithm(settings.get('key_algorithm') or 'ecdsa-p256', host)
    key_max_age = _positive_int(host, 'pki_key_max_age_days', settings.get('key_max_age_days', 0), minimum=0)
    organization = str(settings.get('organization') or 'llmops.vllm')
    directory = str(settings.get('directory') or '').rstrip('/')
    if not directory.startswith('/'):
        _fail(host, 'the certificate directory %r is not an absolute path' % directory,
              'set pki_host_dir (on the hosts) or pki_dir (on the controller) to an absolute path')
    # Its paths go into nginx.conf, keepalived.conf, redis.conf and units as they are.
    if not settings.get('application') and not safe_path(directory):
        _fail(host, 'pki_host_dir %r is not %s; the daemons\' configuration files hold its paths as they are'
              % (directory, PATH_RULE), 'set pki_host_dir to a path such as /etc/llmops-vllm/pki')
    certificates = []
    if settings.get('application'):
        for item in settings.get('clients') or []:
            name, ou = _client(host, item, APPLICATION_OU, 'pki_application_clients')
            certificates.append(_certificate(name, 'client', name, ou, organization, directory, []))
    else:
        if settings.get('server'):
            names, sans = [], []
            for name in list(identity.get('names') or []) + list(settings.get('service_names') or []):
                name = str(name or '').strip()
                if name and _DNS.match(name) and 'DNS:' + name not in names:
                    names.append('DNS:' + name)
            for address in list(identity.get('addresses') or []) + list(settings.get('service_vips') or []):
                address = 'IP:' + _ip(host, 'address', address)
                if address not in sans and not address.startswith('IP:127.'):
                    sans.append(address)
            for entry in settings.get('extra_sans') or []:
                entry = _san(host, entry)
                if entry not in names + sans:
                    (names if entry.startswith('DNS:') else sans).append(entry)
            if not names and not sans:
                _fail(host, 'the server certificate would have no name and no address', 'set pki_server_extra_sans')
            certificates.append(_certificate('server', 'server', host, SERVER_OU, organization, directory,
                                             names + sans, 'root', 'root'))
        for item in settings.get('clients') or []:
            name, ou = _client(host, item, None, 'pki_host_clients')
            if name == 'server' or name == 'ca':
                _fail(host, 'pki_host_clients entry %s clashes with the %s certificate\'s files' % (name, name),
                      'rename the client')
            certificates.append(_certificate(name, 'client', host, ou, organization, directory, [],
                                             str(item.get('owner') or 'root'), str(item.get('group') or 'root')))
    seen = set()
    for cert in certificates:
        if cert['name'] in seen:
            _fail(host, 'two certificates are named %s' % cert['name'], 'give every client its own name')
        seen.add(cert['name'])
    by_name = dict((cert['name'], cert) for cert in certificates)
    return {
        'certificates': certificates,
        # Where the holder finds its files: the CA, its server certificate (None without one), its clients'.
        'files': {
            'ca': '%s/ca.crt' % directory,
            # The CA's CRL, where client certificates are checked: on the hosts that serve TLS.
            'crl': '%s/ca.crl' % directory if 'server' in by_name else None,
            'server': dict([(k, by_name['server'][k + '_path']) for k in ('certificate', 'key')]
                           + [('subject_alt_names', list(by_name['server']['subject_alt_name']))])
            if 'server' in by_name else None,
            'clients': dict((c['name'], {'certificate': c['certificate_path'], 'key': c['key_path']})
                            for c in certificates if c['kind'] == 'client'),
        },
        'not_after': '+%dd' % days,
        'renew_within': '+%dd' % renew,
        'key': key,
        # A key file older than this (its modification time) is replaced, and its certificate issued anew; 0: never.
        'key_max_age_s': key_max_age * 86400,
    }


# Reasons a revocation may give (RFC 5280 less certificateHold and removeFromCRL: a revocation here is final).
REVOCATION_REASONS = ('unspecified', 'key_compromise', 'ca_compromise', 'affiliation_changed', 'superseded',
                      'cessation_of_operation', 'privilege_withdrawn', 'aa_compromise')
_HEX = re.compile(r'^[0-9A-Fa-f]+$|^[0-9A-Fa-f]{2}(:[0-9A-Fa-f]{2})*$')


def _serial(where, value, host=None):
    """A serial number as an integer: an integer as it is; text as hex, with or without colons between octets, as
    openssl (x509 -serial, -text) and nginx ($ssl_client_serial, the audit log's client_serial) print it."""
    text = str(value).strip()
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    if isinstance(value, str) and _HEX.match(text) and int(text.replace(':', ''), 16) > 0:
        return int(text.replace(':', ''), 16)
    _fail(host, '%s: serial %r is neither a positive integer nor hex' % (where, value),
          'copy it from openssl x509 -noout -serial (hex, e.g. 4F1A09 or 4F:1A:09) or from the audit log\'s '
          'client_serial; a decimal serial goes in as a YAML integer')


def revocation(entry, clients_dir, issued=(), where='pki_revoked', host=None):
    """One certificate to revoke, as x509_crl's revoked_certificates takes it.

    entry: exactly one of serial (an integer, or hex text), path (a certificate file on the controller) or name (an
    application client: its current certificate under clients_dir); reason (REVOCATION_REASONS) is optional.
    issued: the application clients still issued; a name among them is refused (its next certificate would be
    revoked as well), except for playbooks/revoke.yml, which passes none: it revokes the current one and the next
    run issues a new one.
    """
    if not isinstance(entry, Mapping):
        _fail(host, '%s entry %r is not a mapping' % (where, entry),
              'write {serial: 4F:1A:...}, {path: /path/to/cert.crt} or {name: <application client>}')
    unknown = sorted(set(entry) - {'serial', 'path', 'name', 'reason'})
    given = [k for k in ('serial', 'path', 'name') if entry.get(k) not in (None, '')]
    label = '%s entry %s' % (where, ', '.join('%s=%s' % (k, entry[k]) for k in given) or repr(dict(entry)))
    if unknown:
        _fail(host, '%s has unknown keys %s' % (label, ', '.join(unknown)), 'use serial, path or name, and reason')
    if len(given) != 1:
        _fail(host, '%s names %s' % (label, 'no certificate' if not given else 'the certificate twice'),
              'give exactly one of serial, path or name')
    reason = str(entry.get('reason') or 'unspecified')
    if reason not in REVOCATION_REASONS:
        _fail(host, '%s: reason %s is not one of %s' % (label, reason, ', '.join(REVOCATION_REASONS)),
              'pick one; a hold (certificate_hold) is not offered, because a revocation here cannot be lifted: '
              'issue a new certificate instead')
    out = {'reason': reason}
    if given == ['serial']:
        out['serial_number'] = _serial(label, entry['serial'], host)
    elif given == ['path']:
        path = str(entry['path'])
        if not path.startswith('/'):
            _fail(host, '%s: the path is not absolute' % label, 'give the certificate file\'s absolute path')
        out['path'] = path
    else:
        name = str(entry['name'])
        if not _NAME.match(name):
            _fail(host, '%s: %s is not a client name' % (label, name), 'use the name of an application client')
        if name in issued:
            _fail(host, '%s: %s is also in pki_application_clients, so each new certificate it gets would be revoked '
                  'too' % (label, name),
                  'to revoke its current certificate and issue it a new one, run playbooks/revoke.yml -e '
                  'revoke_name=%s; to shut it out, remove it from pki_application_clients as well' % name)
        out['path'] = '%s/%s.crt' % (clients_dir.rstrip('/'), name)
    return out


def crl_plan(settings, revoked=(), one_more=None, host=None, next_update=None, now=None):
    """The fleet CA's CRL: where it is, how long it is valid, whether this run signs it again, and what it adds.

    settings: path (the CRL on the controller), crl_validity_days, crl_renew_before_days, directory (pki_dir on the
    controller), clients (the application clients' names). revoked: pki_revoked. one_more: playbooks/revoke.yml's
    certificate, or None. next_update: the current CRL's (x509_crl_info's YYYYMMDDHHMMSSZ), None without one; now: a
    UTC datetime.
    The CRL only grows (x509_crl's update mode): an entry taken out of pki_revoked stays revoked.
    """
    settings = dict(settings or {})
    days = _positive_int(host, 'pki_crl_validity_days', settings.get('crl_validity_days'))
    renew = _positive_int(host, 'pki_crl_renew_before_days', settings.get('crl_renew_before_days'))
    if renew >= days:
        _fail(host, 'pki_crl_renew_before_days (%d) is not below pki_crl_validity_days (%d), so every run would '
              'renew the CRL' % (renew, days), 'make it smaller, e.g. 2 and 7')
    directory = str(settings.get('directory') or '').rstrip('/')
    issued = [str(c.get('name')) for c in settings.get('clients') or [] if isinstance(c, Mapping)]
    if not isinstance(revoked, (list, tuple)):
        _fail(host, 'pki_revoked is not a list', 'write it as a list of {serial|path|name, reason}')
    entries = [revocation(e, directory + '/clients', issued, host=host) for e in revoked]
    if one_more:
        entries.append(revocation(one_more, directory + '/clients', where='the certificate to revoke', host=host))
    path = str(settings.get('path') or directory + '/ca.crl')
    warnings, left = [], None
    if next_update:
        try:
            ends = datetime.datetime.strptime(str(next_update), '%Y%m%d%H%M%SZ')
        except ValueError:
            _fail(host, 'the CRL %s has a next update %r that is not a time' % (path, next_update),
                  'move the file away; the next run signs a new one (revocations it held are lost)')
        left = (ends - (now or datetime.datetime.utcnow())).total_seconds()
        if left < 0:
            warnings.append('the CRL %s passed its next update (%s): every edge refuses every client certificate '
                            'until it is signed again, which this run does (pki stage)' % (path, next_update))
    return {
        'path': path,
        'next_update': '+%dd' % days,
        # Signed again when there is none yet or within the renewal window of its next update.
        'renew': left is None or left < renew * 86400,
        'revoked_certificates': entries,
        'warnings': warnings,
    }


# The fleet CAs on the controller: the issuing one, the next (a rollover's stage add to issue) and the previous
# (stage issue to retire). Every host trusts all of them; only the current one signs certificates.
CA_ROLES = ('current', 'next', 'previous')
ROLLOVER_STAGES = ('add', 'issue', 'retire')
RETIRE_AFTER_DEFAULT_DAYS = 30


def _date(host, what, value):
    try:
        return datetime.datetime.strptime(str(value).strip(), '%Y-%m-%d').date()
    except ValueError:
        _fail(host, '%s %r is not a date' % (what, value), 'write it as YYYY-MM-DD, e.g. 2027-01-31')


def ca_plan(settings, found, stage='', host=None, today=None):
    """What this run does to the fleet's CAs on the controller, or raise PkiPlanError.

    settings: create (pki_ca_create), passphrase (bool: pki_ca_privatekey_passphrase is set), unencrypted
    (pki_ca_privatekey_unencrypted), retire_after (stage issue: the date from which stage retire may run, YYYY-MM-DD;
    empty for RETIRE_AFTER_DEFAULT_DAYS from today), retire_early (stage retire before that date).
    found: {'current'|'next'|'previous': {'certificate': bool, 'key': bool}} as the controller holds them now, and
    'retire_after': the date stage issue recorded ('' without one).
    stage: '' (any other run) or one of ROLLOVER_STAGES (playbooks/ca_rollover.yml).
    Returns moves ([[from, to]], in order; a CA's certificate, key and CRL move together), held_by ({role after the
    moves: role whose files hold it now}), record_retire_after (the date to record, or None), retire (the previous CA
    leaves the trust bundles), create (the CAs this run creates), trusted (the trust bundle's CAs after this run, the
    issuing one first) and messages (what the run does, for the operator).
    """
    settings, found = dict(settings or {}), dict(found or {})
    today = today or datetime.date.today()
    stage = str(stage or '')
    if stage and stage not in ROLLOVER_STAGES:
        _fail(host, 'the CA rollover stage %r is not one of %s' % (stage, ', '.join(ROLLOVER_STAGES)),
              'run playbooks/ca_rollover.yml with -e ca_rollover_stage=add, then issue, then retire')
    has = {}
    for role in CA_ROLES:
        files = dict(found.get(role) or {})
        certificate, key = bool(files.get('certificate')), bool(files.get('key'))
        if certificate != key:
            _fail(host, 'the %s CA on the controller has its %s but not its %s'
                  % (role, 'certificate' if certificate else 'key', 'key' if certificate else 'certificate'),
                  'restore the missing file from your backup of pki_dir%s'
                  % ('; or move the other one away so that a new CA is created (every certificate is then reissued)'
                     if role == 'current' and settings.get('create') else ''))
        has[role] = certificate
    recorded = str(found.get('retire_after') or '')
    moves, create, messages, retire, record = [], [], [], False, None
    if stage == 'add':
        if has['previous']:
            _fail(host, 'stage add: the last rollover has not ended, its previous CA is still trusted%s'
                  % (' (until %s)' % recorded if recorded else ''),
                  'run stage retire first (playbooks/ca_rollover.yml -e ca_rollover_stage=retire)')
        if not has['current']:
            _fail(host, 'stage add: there is no CA to roll over', 'run site.yml first; it creates the fleet CA')
        if has['next']:
            messages.append('stage add: the next CA exists already; every trust bundle holds it')
        else:
            create.append('next')
            messages.append('stage add: a new CA is created and every trust bundle gets it beside the current one')
    elif stage == 'issue':
        if has['next']:
            if has['current'] and has['previous']:
                _fail(host, 'stage issue: the current, next and previous CAs all exist, so the current one cannot '
                      'become the previous', 'run stage retire of the earlier rollover first, then issue')
            if has['current']:
                moves.append(['current', 'previous'])
            moves.append(['next', 'current'])
            if has['current'] or not recorded:
                days = settings.get('retire_after') or ''
                record = (_date(host, 'ca_rollover_retire_after', days) if days
                          else today + datetime.timedelta(days=RETIRE_AFTER_DEFAULT_DAYS))
                if record < today:
                    _fail(host, 'stage issue: ca_rollover_retire_after %s is in the past' % record,
                          'give today\'s date or a later one')
                record = record.isoformat()
            messages.append('stage issue: the next CA becomes the issuing one and every certificate is issued anew '
                            'from it; the previous CA stays trusted until stage retire (from %s)'
                            % (record or recorded))
        elif has['previous']:
            messages.append('stage issue: already done; certificates still of the previous CA are issued anew')
        else:
            _fail(host, 'stage issue: there is no next CA to issue from',
                  'run stage add first, and wait until every client trusts the new CA')
    elif stage == 'retire':
        if has['next']:
            _fail(host, 'stage retire: the next CA does not issue yet', 'run stage issue first')
        if has['previous']:
            if recorded and today < _date(host, 'the recorded retirement date', recorded) \
                    and not settings.get('retire_early'):
                _fail(host, 'stage retire: the previous CA is to stay trusted until %s' % recorded,
                      'run stage retire on or after that date; or, once every client holds a certificate of the '
                      'new CA, add -e ca_rollover_retire_early=true')
            retire = True
            messages.append('stage retire: the previous CA leaves every trust bundle; certificates it issued are '
                            'refused from now on')
        else:
            messages.append('stage retire: no previous CA is trusted; nothing to retire')
    after = dict(has)
    held_by = dict((role, role) for role in CA_ROLES)
    for source, target in moves:
        after[target], after[source] = True, False
        held_by[target] = held_by[source]
    if retire:
        after['previous'] = False
    if not after['current']:
        if not settings.get('create'):
            _fail(host, 'the fleet CA is not on the controller',
                  'point pki_ca_certificate and pki_ca_privatekey at your CA, or set pki_ca_create: true')
        create.insert(0, 'current')
    if create and not settings.get('passphrase') and not settings.get('unencrypted'):
        _fail(host, 'a new %s CA would be created with its private key in clear on the controller'
              % ' and '.join(create),
              'set pki_ca_privatekey_passphrase (keep it in the vault), or pki_ca_privatekey_unencrypted: true to '
              'accept a key in clear')
    for role in create:
        after[role] = True
    return {
        'moves': moves,
        'held_by': held_by,
        'record_retire_after': record,
        'retire': retire,
        'create': create,
        'trusted': [role for role in CA_ROLES if after[role]],
        'messages': messages,
    }
