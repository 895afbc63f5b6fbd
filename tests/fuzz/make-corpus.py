#!/usr/bin/env python3
"""Writes the hand-made seed corpus of each fuzz target into corpus/<target>/.

Valid inputs and near misses (one field wrong), laid out as each target
reads its input (see the comment at the top of fuzz_<target>.c). Run it
after changing a layout; the files are committed.
"""
import os
import shutil
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
AF_INET, AF_INET6 = 2, 10


def write(target, name, data):
    d = os.path.join(HERE, 'corpus', target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), 'wb') as f:
        f.write(data)


def u16(v): return struct.pack('<H', v & 0xffff)
def u32(v): return struct.pack('<I', v & 0xffffffff)
def u64(v): return struct.pack('<Q', v & 0xffffffffffffffff)


def addr4(a, b, c, d, port):
    return u16(AF_INET) + struct.pack('>H', port) + bytes([a, b, c, d]) + bytes(12)


def addr6(last, port):
    return u16(AF_INET6) + struct.pack('>H', port) + bytes(15) + bytes([last])


# ---- wire: header, expected tag (seq u32, 24-byte signature), expected length u64, pos, bit
SIG = bytes([17, 0, 0, 0, 0, 7, 0, 0]) + u32(0xffffffff) + u32(0) + u64(1024)


def wire_header(seq, length, magic=b'RCCD', version=2, flags=0, hbytes=48, crc=0, sig=SIG):
    return (magic + bytes([version, flags]) + u16(hbytes) + u32(seq) + u32(crc) + u64(length) +
            sig)


def wire():
    good = wire_header(5, 4096)
    want = u32(5) + SIG + u64(4096)
    write('wire', 'valid', good + want + bytes([3, 1]))
    write('wire', 'valid-big', wire_header(0xfffffffe, 1 << 40) + u32(0xfffffffe) + SIG + u64(1 << 40))
    write('wire', 'checksum', wire_header(5, 4096, flags=1, crc=0xe3069283) + want)
    write('wire', 'other-seq', good + u32(6) + SIG + u64(4096))
    write('wire', 'other-sig', good + u32(5) + bytes([17, 0, 0, 0, 2]) + SIG[5:] + u64(4096))
    write('wire', 'other-length', good + u32(5) + SIG + u64(8192))
    write('wire', 'bad-magic', wire_header(5, 4096, magic=b'XCCD') + want)
    write('wire', 'version-1', wire_header(5, 4096, version=1, hbytes=24) + want)
    write('wire', 'notice', wire_header(102, 20, flags=2, sig=bytes(24)) + b'rank 1 called x y z ')
    write('wire', 'notice-long', wire_header(102, 5000, flags=2, sig=bytes(24)) + want)
    write('wire', 'announce', wire_header(0, 0, flags=4) + want)
    write('wire', 'flags', wire_header(5, 4096, flags=8) + want)
    write('wire', 'header-30', wire_header(5, 4096, hbytes=30) + want)
    write('wire', 'crc-without-flag', wire_header(5, 4096, crc=1) + want)
    write('wire', 'short', b'RCCD\x02')


# ---- id: 128 bytes, then the fields of an id to encode
def uid(root, comm_id=0x0123456789abcdef, secret=bytes(range(32)), magic=0x55434352, version=1):
    body = u32(magic) + u32(version) + root + u64(comm_id) + secret
    return body + bytes(128 - len(body))


def ident():
    write('id', 'ipv4', uid(addr4(127, 0, 0, 1, 4310)) + b'\x00' + u16(4310) + bytes([127, 0, 0, 1]))
    write('id', 'ipv6', uid(addr6(1, 29500)) + b'\x01' + u16(29500) + bytes(15) + b'\x01')
    write('id', 'bad-magic', uid(addr4(127, 0, 0, 1, 4310), magic=0x55434353))
    write('id', 'version-2', uid(addr4(127, 0, 0, 1, 4310), version=2))
    write('id', 'family-3', uid(u16(3) + bytes(18)))
    write('id', 'zero-port', uid(addr4(10, 0, 0, 1, 0)))
    write('id', 'short', u32(0x55434352) + u32(1))


# ---- hello: mode 0 + 96 bytes, or mode 1 + fields
SECRET = bytes([0x52, 0x43, 0x43, 0x20, 0x66, 0x75, 0x7a, 0x7a, 0x20, 0x73, 0x65, 0x63, 0x72, 0x65,
                0x74, 0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c,
                0x0d, 0x0e, 0x0f, 0xff])
COMM_ID = 0x0123456789abcdef


def hello_bytes(kind, rank, nranks, tag, addr, secret=SECRET, comm_id=COMM_ID, magic=0x48434352,
                version=1):
    b = u32(magic) + u16(version) + u16(kind) + secret + u64(comm_id) + u32(rank) + u32(nranks) \
        + u32(tag) + addr
    return b + bytes(96 - len(b))


def hello():
    a = addr4(127, 0, 0, 1, 40000)
    write('hello', 'root', b'\x00' + hello_bytes(1, 2, 4, 0, a))
    write('hello', 'bootstrap', b'\x00' + hello_bytes(2, 0, 3, 0, addr6(1, 40001)))
    write('hello', 'tcp', b'\x00' + hello_bytes(3, 1, 2, 7, bytes(20)))
    write('hello', 'wrong-secret', b'\x00' + hello_bytes(1, 2, 4, 0, a, secret=bytes(32)))
    write('hello', 'other-comm', b'\x00' + hello_bytes(1, 2, 4, 0, a, comm_id=COMM_ID ^ 1))
    write('hello', 'bad-magic', b'\x00' + hello_bytes(1, 2, 4, 0, a, magic=0x48434353))
    write('hello', 'version-2', b'\x00' + hello_bytes(1, 2, 4, 0, a, version=2))
    write('hello', 'http', b'\x00GET / HTTP/1.1\r\nHost: x\r\n\r\n')
    fields = u16(1) + u32(3) + u32(8) + u32(0)
    write('hello', 'fields', b'\x01' + fields + b'\x00' + a + bytes([5, 3]))
    write('hello', 'fields-other-comm', b'\x01' + fields + b'\x01' + u64(COMM_ID ^ 4) + a + bytes([41, 2]))
    write('hello', 'fields-flip-kind', b'\x01' + fields + b'\x00' + a + bytes([6, 0]))


# ---- bootstrap: mode byte, then the message
def reply(status, nranks, text):
    t = text.encode()
    return u32(status) + u32(nranks) + t + bytes(256 - len(t))


def hello_entry(rank, nranks, family=None, port=40000, v6=False):
    # shape: bit 0 rank u32, bit 1 nranks u32, bit 2 family u16, bit 3 IPv6
    shape = 1 | 2 | (4 if family is not None else 0) | (8 if v6 else 0)
    out = bytes([shape]) + u32(rank) + u32(nranks)
    if family is not None:
        out += u16(family)
    return out + u16(port) + bytes([127, 0, 0, 1]) + bytes(12)


def split_entry(color, key, rank, addr):
    return u32(color) + u32(key) + u32(rank) + addr


def bootstrap():
    write('bootstrap', 'reply-ok', b'\x00' + reply(0, 4, '') + u32(4))
    write('bootstrap', 'reply-failed', b'\x00' + reply(5, 0, 'two processes joined as rank 1') + u32(4))
    write('bootstrap', 'reply-timeout', b'\x00' + reply(100, 4, 'only 3 of 4 ranks reached the root') + u32(4))
    write('bootstrap', 'reply-in-progress', b'\x00' + reply(7, 4, 'x') + u32(4))
    write('bootstrap', 'reply-unknown-code', b'\x00' + reply(9999, 4, 'x') + u32(4))
    write('bootstrap', 'reply-other-count', b'\x00' + reply(0, 5, '') + u32(4))
    write('bootstrap', 'reply-unterminated', b'\x00' + u32(3) + u32(4) + b'A' * 256 + u32(4))
    table = addr4(127, 0, 0, 1, 40000) + addr4(127, 0, 0, 1, 40001) + addr6(1, 40002)
    write('bootstrap', 'table-3', b'\x01\x02' + table)
    write('bootstrap', 'table-bad-family', b'\x01\x01' + addr4(10, 0, 0, 1, 1) + u16(1) + bytes(18))
    write('bootstrap', 'root-job-3', b'\x02' + hello_entry(0, 3) + hello_entry(2, 3, v6=True)
          + hello_entry(1, 3))
    write('bootstrap', 'root-twice', b'\x02' + hello_entry(1, 3) + hello_entry(1, 3))
    write('bootstrap', 'root-sizes-differ', b'\x02' + hello_entry(0, 3) + hello_entry(1, 4))
    write('bootstrap', 'root-bad-rank', b'\x02' + hello_entry(5, 3) + hello_entry(0xffffffff, 3))
    write('bootstrap', 'root-bad-family', b'\x02' + hello_entry(0, 2) + hello_entry(1, 2, family=0))
    a = addr4(127, 0, 0, 1, 40000)
    grid = b''.join(split_entry(r % 2, 10 - r, r, a) for r in range(6))
    write('bootstrap', 'split-grid', b'\x03\x05' + grid)
    write('bootstrap', 'split-equal-keys', b'\x03\x03' + b''.join(split_entry(0, 1, r, a) for r in range(4)))
    write('bootstrap', 'split-negative', b'\x03\x02' + b''.join(
        split_entry(-1 if r else 7, -r, r, a) for r in range(3)))


# ---- params: the variable's text
def params():
    values = ['256K', '4', '300', '64M', '1G', '0', '8k', '2m', '1073741824', '9223372036854775807',
              '99999999999999999999', '8589934592G', '12 parsecs', '-1', '+5', ' 5', '1.5', '0x10',
              '1KB', 'K', '', 'auto', 'ring', 'rabenseifner', 'rd', 'direct', 'RING', 'info',
              'TRACE', 'warn', 'none', 'debug', '/tmp/rcc-%h-%p.log', '%', '%%p', '%h%h%h', 'cubic',
              'tcp', 'twostep']
    for i, v in enumerate(values):
        write('params', '%02d' % i, v.encode())


# ---- addr: the text (its first 20 bytes also as a wire address)
def addr():
    texts = ['127.0.0.1:4310', '[::1]:29500', '::1:80', '[fe80::1%1]:80', '10.0.0.1:0',
             '10.0.0.1:65536', '10.0.0.1:65535', 'localhost:80', 'host', '[::1]80', ':80',
             '1.2.3.4: 80', '1.2.3.4:+80', '[::ffff:1.2.3.4]:7', '1.2.3.4:80:90', '[1.2.3.4]:5']
    for i, t in enumerate(texts):
        write('addr', '%02d' % i, t.encode())
    write('addr', 'wire-ipv4', addr4(127, 0, 0, 1, 4310))
    write('addr', 'wire-ipv6', addr6(1, 4310))
    write('addr', 'wire-family-1', u16(1) + bytes(18))


# ---- env: a config (size u64, magic, version, timeout_ms, blocking, chunk_bytes, padding, then
# 8 bytes of a later version's fields), 3 bytes whose bits set ENV_VARS, the values, '\n'-ended
ENV_VARS = ['RCC_RANK', 'RCC_NRANKS', 'RANK', 'WORLD_SIZE', 'SLURM_PROCID', 'SLURM_NTASKS',
            'OMPI_COMM_WORLD_RANK', 'OMPI_COMM_WORLD_SIZE', 'RCC_ROOT', 'MASTER_ADDR',
            'MASTER_PORT', 'RCC_SECRET', 'TORCHELASTIC_RUN_ID', 'SLURM_JOB_ID', 'SLURM_STEP_ID',
            'OMPI_MCA_ess_base_jobid', 'PMIX_NAMESPACE']
CONFIG_MAGIC, VERSION_CODE = 0x72636366, 100


def config(size=32, magic=CONFIG_MAGIC, timeout_ms=0, blocking=1, chunk_bytes=0):
    return (u64(size) + u32(magic) + u32(VERSION_CODE) + u32(timeout_ms) + u32(blocking) +
            u32(chunk_bytes) + bytes(4) + b'later v.')


def env_vars(**values):
    mask, out = 0, b''
    for i, name in enumerate(ENV_VARS):
        if name in values:
            mask |= 1 << i
            out += values[name].encode() + b'\n'
    return struct.pack('<I', mask)[:3] + out


SECRET_HEX = '00112233445566778899aabbccddeeff' * 2


def env():
    ok = config()
    rcc = dict(RCC_RANK='1', RCC_NRANKS='4', RCC_ROOT='127.0.0.1:4310', RCC_SECRET=SECRET_HEX)
    seeds = {
        'rcc': rcc,
        'torchrun': dict(RANK='0', WORLD_SIZE='8', MASTER_ADDR='10.0.0.1', MASTER_PORT='29500',
                         TORCHELASTIC_RUN_ID='f00d'),
        'torchrun-ipv6': dict(RANK='3', WORLD_SIZE='4', MASTER_ADDR='fe80::1', MASTER_PORT='29500'),
        'slurm': dict(SLURM_PROCID='5', SLURM_NTASKS='6', SLURM_JOB_ID='4242', SLURM_STEP_ID='0',
                      RCC_ROOT='[::1]:7000'),
        'ompi': dict(OMPI_COMM_WORLD_RANK='1', OMPI_COMM_WORLD_SIZE='2',
                     OMPI_MCA_ess_base_jobid='77', PMIX_NAMESPACE='prterun-x-1',
                     MASTER_ADDR='127.0.0.1', MASTER_PORT='1'),
        'all': {name: v for name, v in zip(ENV_VARS, ['0', '4', '1', '4', '2', '4', '3', '4',
                                                      '127.0.0.1:1000', '::1', '2000', SECRET_HEX,
                                                      'r', 'j', 's', 'o', 'p'])},
        'empty-values': dict(RCC_RANK='', RCC_NRANKS='', RANK='0', WORLD_SIZE='1', RCC_ROOT='',
                             MASTER_ADDR='127.0.0.1', MASTER_PORT='80', RCC_SECRET=''),
        'bad-secret': dict(rcc, RCC_SECRET=SECRET_HEX[:17] + 'z' + SECRET_HEX[18:]),
        'short-secret': dict(rcc, RCC_SECRET=SECRET_HEX[:63]),
        'missing-half': dict(RANK='1', MASTER_ADDR='127.0.0.1', MASTER_PORT='80'),
        'rank-too-big': dict(rcc, RCC_RANK='4'),
        'size-too-big': dict(rcc, RCC_NRANKS='16777217'),
        'signs': dict(rcc, RCC_RANK=' +0', RCC_NRANKS='-0'),
        'no-root': dict(RANK='0', WORLD_SIZE='1', MASTER_PORT='80'),
        'bad-root': dict(rcc, RCC_ROOT='127.0.0.1'),
        'bracketed-addr': dict(RANK='0', WORLD_SIZE='1', MASTER_ADDR='[::1]', MASTER_PORT='80'),
        'none': {},
    }
    for name, values in seeds.items():
        write('env', name, ok + env_vars(**values))
    configs = {
        'bad-magic': config(magic=CONFIG_MAGIC ^ 1),
        'size-4': config(size=4),
        'size-11': config(size=11),
        'size-12': config(size=12),
        'size-27': config(size=27),
        'size-28': config(size=28),
        'size-40': config(size=40),
        'size-huge': config(size=1 << 40),
        'blocking-0': config(blocking=0),
        'timeout-negative': config(timeout_ms=-1),
        'timeout-max': config(timeout_ms=0x7fffffff),
        'chunk-63': config(chunk_bytes=63),
        'chunk-64': config(chunk_bytes=64),
        'chunk-negative': config(chunk_bytes=-64),
    }
    for name, c in configs.items():
        write('env', 'config-' + name, c + env_vars(**rcc))


if __name__ == '__main__':
    shutil.rmtree(os.path.join(HERE, 'corpus'), ignore_errors=True)
    for make in (wire, ident, hello, bootstrap, params, addr, env):
        make()
