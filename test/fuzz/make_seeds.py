#!/usr/bin/env python3
"""Writes the seed inputs in test/fuzz/corpus/<target>/: valid packet
headers, valid session-management messages and a few engine scenarios.
Rerun after changing an input format; the files are committed."""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))

PKT_MAGIC = 0xB
REQ, RFR, EXPL_CR, RESP = 0, 1, 2, 3


def pkt_hdr(ptype, req_type, msg_size, session, pkt_num, req_num, bulk=0, status=0):
    w0 = req_type | (msg_size & 0xFFFFFF) << 8 | session << 32 | (pkt_num & 0x3FFF) << 48 | ptype << 62
    w1 = (req_num & ((1 << 44) - 1)) | PKT_MAGIC << 44 | bulk << 48 | status << 49
    return struct.pack('<QQ', w0, w1)


SM_MAGIC, SM_VERSION, SM_BYTES = 0x4350524C, 3, 88


def sm_msg(mtype, err=0, transport=1, client_rpc=0, server_rpc=1, routing=b'',
           client_sn=0, server_sn=0xFFFF, incarnation=0x123456789A, token=0x1122334455667788,
           version=SM_VERSION, length=SM_BYTES, max_data_per_pkt=0, credits=0):
    head = struct.pack('<IHHBBBBBBHH', SM_MAGIC, version, length, mtype, err, transport,
                       client_rpc, server_rpc, len(routing), client_sn, server_sn)
    inc = (incarnation & ((1 << 48) - 1)).to_bytes(6, 'little')
    body = head + inc + struct.pack('<Q', token) + routing.ljust(48, b'\0')
    if version >= 2:  # v2 appends the sender's data bytes per packet
        body += struct.pack('<I', max_data_per_pkt)
    if version >= 3:  # v3: session credits asked or granted, two reserved bytes
        body += struct.pack('<HH', credits, 0)
    return body


def udp_routing(ip=(127, 0, 0, 1), port=40000):
    return bytes(ip) + struct.pack('>H', port) + struct.pack('<H', 0x5544)


def write(target, name, data):
    d = os.path.join(HERE, 'corpus', target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), 'wb') as f:
        f.write(data)


def main():
    # fuzz_pkt_hdr: [engine selector][16-byte header][data_len u16][20 bytes of make() args]
    args = bytes(20)
    t = 'fuzz_pkt_hdr'
    write(t, 'req_single', b'\x01' + pkt_hdr(REQ, 1, 32, 0, 0, 8) + struct.pack('<H', 32) + args)
    write(t, 'resp_multi_pkt1', b'\x01' + pkt_hdr(RESP, 1, 3000, 2, 1, 17) + struct.pack('<H', 1024) + args)
    write(t, 'rfr', b'\x00' + pkt_hdr(RFR, 1, 0, 0, 3, 9) + struct.pack('<H', 0) + args)
    write(t, 'expl_cr', b'\x02' + pkt_hdr(EXPL_CR, 1, 0, 0, 1, 9) + struct.pack('<H', 0) + args)
    write(t, 'bulk_req', b'\x00' + pkt_hdr(REQ, 1, 1 << 20, 0, 0, 0, bulk=1) + struct.pack('<H', 16) + args)
    # The byte image from docs/wire_format.md.
    doc = bytes.fromhex('5A563412EFBE34D23412F0DEBCBA0300')
    write(t, 'doc_example', b'\x01' + doc + struct.pack('<H', 0) + args)

    # fuzz_sm_msg: one datagram each.
    t = 'fuzz_sm_msg'
    write(t, 'connect_req', sm_msg(1, routing=udp_routing(), max_data_per_pkt=1456, credits=32))
    write(t, 'connect_resp', sm_msg(2, routing=udp_routing(port=40001), server_sn=3,
                                    max_data_per_pkt=1456, credits=32))
    write(t, 'connect_refused', sm_msg(2, err=3))
    write(t, 'connect_refused_pkt_size', sm_msg(2, err=10))
    write(t, 'disconnect_req', sm_msg(3, client_sn=1, server_sn=3))
    write(t, 'heartbeat', sm_msg(5, transport=0, client_rpc=0, server_rpc=0))
    write(t, 'probe_req', sm_msg(6, transport=0, server_rpc=0, client_sn=0xFFFF, token=0x0BADC0FFEE))
    write(t, 'probe_resp', sm_msg(7, transport=0, server_rpc=0, client_sn=0xFFFF, token=0x0BADC0FFEE))
    write(t, 'session_reset_req', sm_msg(8, err=11, client_sn=1, server_sn=3))
    write(t, 'session_reset_resp', sm_msg(9, client_sn=1, server_sn=3))
    # A version-1 peer: its 80-byte connect request, and the envelope alone.
    write(t, 'other_version', sm_msg(1, version=1, length=80)[:32])
    write(t, 'v1_connect_req', sm_msg(1, routing=udp_routing(), version=1, length=80))
    write(t, 'v2_connect_req', sm_msg(1, routing=udp_routing(), version=2, length=84,
                                      max_data_per_pkt=1456))

    # fuzz_engine_rx: [echo_sel][b_sel] then datagrams [mode][len][bytes]
    # (mode bits are documented in fuzz_engine_rx.cc).
    t = 'fuzz_engine_rx'

    def dgram(mode, data):
        return bytes([mode, len(data)]) + data

    payload = bytes(range(32))
    # An intruder's well-formed request for session A: dropped (wrong source).
    write(t, 'intruder_req', b'\x00\x00' + dgram(0x04 | 0x08, pkt_hdr(REQ, 1, 32, 0, 0, 0) + payload))
    # A forged first packet of a 3-packet request on B, then its next packet.
    write(t, 'forged_multi_b', b'\x06\x00' +
          dgram(0x02 | 0x04 | 0x08 | 0x10 | 0x20 | 0x40, pkt_hdr(REQ, 1, 300, 0, 0, 1) + bytes(112)) +
          dgram(0x02 | 0x04 | 0x08 | 0x10 | 0x20 | 0x40, pkt_hdr(REQ, 1, 300, 0, 1, 1) + bytes(112)))
    # B has a request in flight; a forged response for its live number.
    write(t, 'forged_resp_b', b'\x01\x03' +
          dgram(0x01 | 0x02 | 0x04 | 0x10 | 0x20 | 0x40, pkt_hdr(RESP, 1, 1, 0, 0, 0) + b'\x5a'))
    # A forged bulk control packet aimed at a registered buffer.
    ctrl = struct.pack('<QII', 0x101, 0, 64)
    write(t, 'forged_bulk_b', b'\x02\x00' +
          dgram(0x02 | 0x04 | 0x08 | 0x10 | 0x20 | 0x40, pkt_hdr(REQ, 1, 64, 0, 0, 1, bulk=1) + ctrl))
    # Truncated and empty datagrams to both ends.
    write(t, 'short', b'\x03\x00' + dgram(0x00, b'\x0b' * 8) + dgram(0x03, b'') + dgram(0x41, b'\xff' * 15))

    # fuzz_verbs_routing: layout 3 routing info (verbs_routing.h), 40 bytes.
    t = 'fuzz_verbs_routing'

    def verbs_routing(bulk=0, rd_atomic=0, fields=bytes(12), layout=3):
        gid = bytes(10) + b'\xff\xff' + bytes([10, 0, 0, 1])
        return gid + struct.pack('<IHHBBBB', 0x11, 0, 0x5642, layout, rd_atomic, bulk, 0) + fields

    write(t, 'datagrams_only', verbs_routing())
    write(t, 'rc_offer', verbs_routing(1, 16, struct.pack('<III', 0x12, 0xABCDEF, 0x13)))
    write(t, 'dc_offer', verbs_routing(2, 16, struct.pack('<IQ', 0x345, 0x0123456789ABCDEF)))
    write(t, 'layout2', verbs_routing(0, 16, struct.pack('<III', 0x12, 0xABCDEF, 0), layout=2))

    # fuzz_kv_protocol: a selector byte (0 key request, 1 PUT, 2 INFO
    # response), then the message (apps/kv/protocol.h).
    t = 'fuzz_kv_protocol'
    key = b'user000000000042'
    write(t, 'get', b'\x00' + struct.pack('<H', len(key)) + key)
    write(t, 'put', b'\x01' + struct.pack('<HI', len(key), 32) + key + b'v' * 32)
    write(t, 'put_empty_value', b'\x01' + struct.pack('<HI', 1, 0) + b'k')
    write(t, 'info', b'\x02' + struct.pack('<HI', 4, 1 << 20))


if __name__ == '__main__':
    main()
