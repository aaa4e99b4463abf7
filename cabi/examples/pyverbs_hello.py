#!/usr/bin/python3
"""pyverbs_hello.py: RC SEND and RDMA WRITE with pyverbs (rdma-core's
Python bindings; Debian: python3-pyverbs), for docs/cabi.md.

Two processes each open the first RDMA device and create a PD, a memory
region, a CQ and an RC queue pair; they exchange the QP's address (QP number,
PSN, GID) and the region's rkey and address over TCP as one JSON line, and
move the QP to RTS. Then each side SENDs a message to the other (which has a
receive posted) and RDMA WRITEs a second one straight into the other's
memory. Every completion is checked, then each side checks what arrived in
its own memory. Exit status 0 only if every check passed.

    python3 pyverbs_hello.py                 # server: waits for one client
    python3 pyverbs_hello.py SERVER [PORT]   # client (PORT defaults to 7472)

It runs unchanged on any rdma-core device; over tbrdma:
    tbrdma exec python3 pyverbs_hello.py ...
"""
import json
import random
import socket
import sys

import pyverbs.enums as e
from pyverbs.addr import AHAttr, GID, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.device import Context, get_device_list
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import RecvWR, SGE, SendWR

GID_INDEX = 1      # the IPv4 address as a RoCE v2 GID
MSG = 64           # bytes per message
RECV_OFF = 0       # where the peer's SEND lands
WRITE_OFF = 1024   # where the peer's RDMA WRITE lands
SRC_OFF = 2048     # where our outgoing messages are built

failures = 0


def check(ok, what):
    global failures
    print("%-6s %s" % ("ok" if ok else "FAILED", what), flush=True)
    if not ok:
        failures += 1


def wait_one(cq):
    """Busy-polls cq for one completion (a real program would wait on a
    completion channel)."""
    while True:
        n, wcs = cq.poll()
        if n > 0:
            return wcs[0]


def exchange(sock, lines, mine):
    """Sends one JSON line on sock and reads the peer's from lines, a file
    reading sock (one for the whole connection: it buffers what it reads)."""
    sock.sendall((json.dumps(mine) + "\n").encode())
    line = lines.readline()
    if not line:
        sys.exit("peer closed the TCP connection")
    return json.loads(line)


def main():
    server = sys.argv[1] if len(sys.argv) > 1 else None
    port = int(sys.argv[2]) if len(sys.argv) > 2 else 7472
    role = "client" if server else "server"

    devs = get_device_list()
    if not devs:
        sys.exit("no RDMA device found")
    name = devs[0].name.decode()
    print("device", name, flush=True)

    with Context(name=name) as ctx:
        pd = PD(ctx)
        access = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE
        mr = MR(pd, 4096, access)
        cq = CQ(ctx, 16)
        cap = QPCap(max_send_wr=4, max_recv_wr=4, max_send_sge=1, max_recv_sge=1)
        qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=cap))

        # Tell the peer who we are; learn who it is.
        port_attr = ctx.query_port(1)
        gid = ctx.query_gid(port_num=1, index=GID_INDEX)
        psn = random.getrandbits(24)
        if server:
            sock = socket.create_connection((server, port))
        else:
            ls = socket.create_server(("", port), reuse_port=False)
            print("waiting for a client on TCP port", port, flush=True)
            sock, _ = ls.accept()
            ls.close()
        lines = sock.makefile("r")
        peer = exchange(sock, lines, {"lid": port_attr.lid, "qpn": qp.qp_num, "psn": psn,
                                      "gid": str(gid), "rkey": mr.rkey, "addr": mr.buf})
        print("local:  QPN 0x%06x PSN 0x%06x GID %s" % (qp.qp_num, psn, gid), flush=True)
        print("remote: QPN 0x%06x PSN 0x%06x GID %s" % (peer["qpn"], peer["psn"], peer["gid"]), flush=True)

        # RESET -> INIT -> RTR -> RTS; pyverbs sets the attribute masks.
        attr = QPAttr(qp_state=e.IBV_QPS_INIT)
        attr.qp_access_flags = access
        attr.port_num = 1
        attr.path_mtu = port_attr.active_mtu
        attr.dest_qp_num = peer["qpn"]
        attr.rq_psn = peer["psn"]
        attr.max_dest_rd_atomic = 1
        attr.min_rnr_timer = 12
        gr = GlobalRoute(dgid=GID(peer["gid"]), sgid_index=GID_INDEX)
        attr.ah_attr = AHAttr(gr=gr, is_global=1, port_num=1, dlid=peer["lid"])
        attr.sq_psn = psn
        attr.timeout = 14
        attr.retry_cnt = 7
        attr.rnr_retry = 7
        attr.max_rd_atomic = 1
        qp.to_rts(attr)
        # A receive for the peer's SEND (a QP takes receives from INIT on),
        # posted before telling the peer that it may send.
        qp.post_recv(RecvWR(wr_id=1, num_sge=1, sg=[SGE(mr.buf + RECV_OFF, MSG, mr.lkey)]))
        exchange(sock, lines, {"ready": True})  # both QPs are in RTS now
        check(qp.qp_state == e.IBV_QPS_RTS, "QP in RTS")

        # SEND: the peer's posted receive takes it.
        sent = ("send from the " + role).encode().ljust(MSG, b"\0")
        mr.write(sent, MSG, SRC_OFF)
        wr = SendWR(wr_id=2, opcode=e.IBV_WR_SEND, num_sge=1,
                    sg=[SGE(mr.buf + SRC_OFF, MSG, mr.lkey)], send_flags=e.IBV_SEND_SIGNALED)
        qp.post_send(wr)
        # Two completions, in either order: our SEND and the peer's.
        for _ in range(2):
            wc = wait_one(cq)
            if wc.opcode == e.IBV_WC_RECV:
                got = mr.read(MSG, RECV_OFF).rstrip(b"\0").decode()
                want = "send from the " + ("server" if server else "client")
                check(wc.status == e.IBV_WC_SUCCESS and wc.byte_len == MSG and got == want,
                      "SEND arrived: %d bytes, %r (status %d)" % (wc.byte_len, got, wc.status))
            else:
                check(wc.status == e.IBV_WC_SUCCESS and wc.opcode == e.IBV_WC_SEND and wc.wr_id == 2,
                      "our SEND completed (status %d)" % wc.status)

        # RDMA WRITE into the peer's memory; the peer's CPU does nothing.
        written = ("write from the " + role).encode().ljust(MSG, b"\0")
        mr.write(written, MSG, SRC_OFF + MSG)
        wr = SendWR(wr_id=3, opcode=e.IBV_WR_RDMA_WRITE, num_sge=1,
                    sg=[SGE(mr.buf + SRC_OFF + MSG, MSG, mr.lkey)], send_flags=e.IBV_SEND_SIGNALED)
        wr.set_wr_rdma(peer["rkey"], peer["addr"] + WRITE_OFF)
        qp.post_send(wr)
        wc = wait_one(cq)
        check(wc.status == e.IBV_WC_SUCCESS and wc.opcode == e.IBV_WC_RDMA_WRITE and wc.wr_id == 3,
              "our RDMA WRITE completed (status %d)" % wc.status)

        exchange(sock, lines, {"done": True})  # the peer's WRITE has completed too
        got = mr.read(MSG, WRITE_OFF).rstrip(b"\0").decode()
        want = "write from the " + ("server" if server else "client")
        check(got == want, "RDMA WRITE arrived: %r" % got)
        sock.close()
        qp.close()
        cq.close()
        mr.close()
        pd.close()

    if failures:
        print("pyverbs_hello: %d checks FAILED" % failures)
        return 1
    print("pyverbs_hello: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
