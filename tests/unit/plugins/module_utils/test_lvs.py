"""The LVS director plan: VRRP, DR services from the nodes' summaries, and the refusals before any host changes."""

import copy

import pytest

from ansible_collections.llmops.vllm.plugins.module_utils._lvs import LvsPlanError, lvs_plan

VIP = '10.20.0.100'


def node(name, address, port=8000, vips=(VIP,), sans=None):
    return {
        'version': 1,
        'host': name,
        'address': address,
        'port': port,
        'vips': list(vips),
        'health_url': 'https://%s:%d/health' % (address, port),
        'stats_url': 'https://%s:%d/edge/metrics' % (address, port),
        'tls': {'certificate': '/c', 'key': '/k', 'ca': '/ca',
                'subject_alt_names': sans if sans is not None else ['IP:%s' % address] + ['IP:%s' % v for v in vips]},
    }


NODES = [node('gpu-node01', '10.20.0.31'), node('gpu-node02', '10.20.0.32')]
DIRECTORS = [
    {'name': 'lb01', 'address': '10.20.0.11', 'network': '10.20.0.0/24', 'interface': 'eth0'},
    {'name': 'lb02', 'address': '10.20.0.12', 'network': '10.20.0.0/24', 'interface': 'eth0'},
]
SETTINGS = {'vips': [VIP], 'port': 8000, 'real_servers_group': 'vllm_nodes', 'auth_pass': 's3cret'}


def plan(nodes=None, directors=None, host='lb01', **settings):
    return lvs_plan(copy.deepcopy(NODES if nodes is None else nodes), DIRECTORS if directors is None else directors,
                    dict(SETTINGS, **settings), host)


def test_one_dr_service_per_vip_with_every_node_as_real_server():
    result = plan(vips=[VIP, '10.20.0.101'], nodes=[node('gpu-node01', '10.20.0.31', vips=[VIP, '10.20.0.101']),
                                                    node('gpu-node02', '10.20.0.32', vips=[VIP, '10.20.0.101'])])
    assert [(vs['address'], vs['port'], vs['method'], vs['scheduler'], vs['persistence_timeout'])
            for vs in result['virtual_servers']] == [(VIP, 8000, 'DR', 'wlc', 0), ('10.20.0.101', 8000, 'DR', 'wlc', 0)]
    real = result['virtual_servers'][0]['real_servers']
    assert [(rs['host'], rs['address'], rs['port'], rs['weight'], rs['health_path']) for rs in real] == [
        ('gpu-node01', '10.20.0.31', 8000, 100, '/health'), ('gpu-node02', '10.20.0.32', 8000, 100, '/health')]
    assert real[0]['stats_url'] == 'https://10.20.0.31:8000/edge/metrics'
    assert result['warnings'] == []


def test_vrrp_unicast_peers_priorities_and_preemption():
    first, second = plan(host='lb01'), plan(host='lb02')
    assert (first['vrrp']['priority'], second['vrrp']['priority']) == (150, 140)
    assert first['vrrp']['unicast_src'] == '10.20.0.11' and first['vrrp']['unicast_peers'] == ['10.20.0.12']
    assert second['vrrp']['unicast_peers'] == ['10.20.0.11']
    assert first['vrrp']['vips'] == ['10.20.0.100/32'] and first['vrrp']['interface'] == 'eth0'
    assert first['vrrp']['preempt'] is False and first['vrrp']['authentication'] is True
    assert plan(priority=200, preempt=True)['vrrp']['priority'] == 200
    assert first['sync_daemon'] == {'enabled': True, 'interface': 'eth0', 'id': 51}


def test_breaker_defaults_and_overrides():
    breaker = plan()['breaker']
    assert (breaker['window'], breaker['min_requests'], breaker['threshold'], breaker['floor']) == (30, 20, 0.05, 1)
    assert plan(breaker={'threshold': 0.1, 'floor': 2})['breaker']['threshold'] == 0.1
    assert (breaker['interval'], breaker['stale']) == (1, 5)


PATHS = {'state_dir': '/var/lib/b', 'track_dir': '/var/lib/b/track', 'log': '/var/log/b.log', 'textfile': '/t/b.prom',
         'ca': '/ca.crt', 'cert': '/hc.crt', 'key': '/hc.key'}


def test_the_breaker_config_watches_each_node_once_with_one_track_file_for_every_vip():
    vips = [VIP, '10.20.0.101']
    nodes = [node('gpu-node01', '10.20.0.31', vips=vips), node('gpu-node02', '10.20.0.32', vips=vips)]
    result = plan(nodes=nodes, vips=vips, breaker_paths=PATHS, breaker={'interval': 2})
    config = result['breaker_config']
    assert [service['name'] for service in config['services']] == ['vllm_nodes']
    assert config['services'][0]['nodes'] == [
        {'name': 'gpu-node01', 'url': 'https://10.20.0.31:8000/edge/metrics', 'weight': 100,
         'track_file': '/var/lib/b/track/breaker_gpu-node01'},
        {'name': 'gpu-node02', 'url': 'https://10.20.0.32:8000/edge/metrics', 'weight': 100,
         'track_file': '/var/lib/b/track/breaker_gpu-node02'}]
    assert [[rs['breaker_track'] for rs in vs['real_servers']] for vs in result['virtual_servers']] == [
        ['breaker_gpu-node01', 'breaker_gpu-node02']] * 2
    assert (config['interval'], config['timeout'], config['settings']['stale'], config['settings']['floor']) == (
        2, 2, 8, 1)
    assert config['tls'] == {'ca': '/ca.crt', 'cert': '/hc.crt', 'key': '/hc.key'}
    assert (config['state_dir'], config['log'], config['textfile']) == ('/var/lib/b', '/var/log/b.log', '/t/b.prom')


def test_the_breaker_config_is_valid_for_the_breaker_and_absent_when_off():
    from ansible_collections.llmops.vllm.plugins.module_utils._breaker import check_config
    checked = check_config(plan(breaker_paths=PATHS)['breaker_config'])
    assert [node['name'] for node in checked['services'][0]['nodes']] == ['gpu-node01', 'gpu-node02']
    assert plan(breaker={'enabled': False})['breaker_config'] is None


def test_the_mtls_health_check_has_its_own_interval():
    assert plan()['checks'] == {'delay_loop': 1, 'health_delay_loop': 1, 'connect_timeout': 1, 'retry': 1,
                                'delay_before_retry': 1}
    assert plan(delay_loop=1, health_delay_loop=5)['checks']['health_delay_loop'] == 5


def test_no_authentication_is_a_warning():
    assert 'without authentication' in plan(auth_pass='')['warnings'][0]


@pytest.mark.parametrize('kwargs, message', [
    ({'vips': ['10.30.0.100']}, 'VIP 10.30.0.100 is outside director lb01\'s network 10.20.0.0/24'),
    ({'vips': ['10.20.0.31'], 'nodes': [node('gpu-node01', '10.20.0.31', vips=['10.20.0.31'])]},
     'real server gpu-node01: lvs_director: its address 10.20.0.31 is also a VIP'),
    ({'nodes': [node('gpu-node01', '10.20.0.31', port=8443)]},
     'real server gpu-node01: lvs_director: its edge listens on port 8443, the virtual service on 8000'),
    ({'directors': DIRECTORS[:1]}, 'VRRP is on but the directors group has only lb01'),
    ({'nodes': [node('gpu-node02', '10.20.0.32', sans=['IP:10.20.0.32'])]},
     'real server gpu-node02: lvs_director: its server certificate does not name the VIP 10.20.0.100'),
    ({'nodes': [node('gpu-node02', '10.20.0.32', vips=[])]}, 'its edge does not listen on the VIP 10.20.0.100'),
    ({'vips': []}, 'no VIP to announce'),
    ({'nodes': []}, 'no real server'),
    ({'scheduler': 'fastest'}, "lvs_director_scheduler 'fastest' is not an IPVS scheduler"),
    ({'weight': 300}, 'lvs_director_weight is 300'),
    ({'health_delay_loop': 0}, 'lvs_director_health_delay_loop is 0'),
    ({'auth_pass': 'much-too-long'}, 'at most 8'),
    ({'auth_pass': 'x\n}\n}'}, 'lvs_director_vrrp_auth_pass has characters keepalived.conf cannot hold'),
    ({'auth_pass': 'a b#c'}, 'use letters, digits and . _ + = @ / - only'),
    ({'breaker': {'threshold': 5}}, 'lvs_director_breaker.threshold is 5'),
    ({'breaker': {'windw': 5}}, 'unknown keys windw'),
    ({'breaker': {'cooldown': 60, 'max_cooldown': 30}}, 'max_cooldown (30) is below cooldown (60)'),
    ({'host': 'lb09'}, 'this host is not among the directors lb01, lb02'),
])
def test_refusals_name_the_host_the_problem_and_the_fix(kwargs, message):
    with pytest.raises(LvsPlanError) as error:
        plan(**kwargs)
    assert message in str(error.value)
    assert str(error.value).startswith('host lb0') and 'Fix: ' in str(error.value)


def test_a_single_director_without_vrrp_holds_the_vips():
    result = plan(directors=DIRECTORS[:1], vrrp=False)
    assert result['vrrp']['enabled'] is False and result['vrrp']['vips'] == ['10.20.0.100/32']


def test_a_node_without_certificate_names_is_not_refused():
    # Certificates not issued by the pki role (edge_tls_*): their names are unknown to the plan.
    assert plan(nodes=[node('gpu-node01', '10.20.0.31', sans=None) | {'tls': {}}])['virtual_servers']
