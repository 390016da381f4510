#!/usr/bin/env python3
"""The laws test_schedulers' test_hedge_by_hand expects from Hedge, recomputed from the rule in
schedulers/hedge.c's header comment, in float64, standard library only:

    python3 tests/ref/hedge_by_hand.py

A request at length l pays share = SPS(R)/R plus what its own drafts add to a forward over the round's
other rows (B0 = batch_tokens - verified); tokens: min(l, k) + 1 when revealed, else v + 1 plus the
expected acceptances past v (the round's confidences, or the request's Laplace rate); gain = tokens /
cost / best rate; log w[l] -= eta (1 - gain). Printed: each request's law after each round."""
import math
import struct


def f32(x):
    return struct.unpack("f", struct.pack("f", x))[0]


def sec(B):  # the test's table: B = 1, 8, 64 at 1, 1.7, 52.1 s, linear between
    pts = [(1, 1.0), (8, 1.7), (64, 52.1)]
    for (b0, s0), (b1, s1) in zip(pts, pts[1:]):
        if B <= b1:
            return s0 + (s1 - s0) * (B - b0) / (b1 - b0)
    raise ValueError(B)


ETA, N = 1.0, 5
state = {rid: dict(logw=[0.0] * N, tested=0, passed=0) for rid in (11, 12)}


def observe(rows, batch_tokens):
    R = len(rows)
    for rid, proposed, v, k, conf in rows:
        q = state[rid]
        B0 = batch_tokens - v
        share = sec(R) / R
        cost = [share + max(sec(B0 + l) - sec(B0), 0) for l in range(N)]
        best = max((l + 1) / cost[l] for l in range(N))
        alpha = (q["passed"] + 1) / (q["tested"] + 2)
        for l in range(N):
            lt = min(l, proposed)
            tok = min(lt, k) + 1
            if k == v and lt > v:
                a = 1.0
                for j in range(v + 1, lt + 1):
                    a *= conf[j - 1] if conf else alpha
                    tok += a
            q["logw"][l] -= ETA * (1 - tok / cost[lt] / best)
        q["tested"] += k + 1 if k < v else v
        q["passed"] += k


def show(t):
    for rid in (12, 11):
        lw = state[rid]["logw"]
        m = max(lw)
        w = [math.exp(x - m) for x in lw]
        print("round %d request %d: {%s}" % (t, rid, ", ".join("%.12f" % (x / sum(w)) for x in w)))


conf11 = [f32(x) for x in (0.9, 0.9, 0.6, 0.5)]  # the test's float confidences
observe([(12, 4, 3, 1, None), (11, 4, 2, 2, None)], 7)
show(1)
observe([(12, 4, 3, 1, None), (11, 3, 2, 2, conf11)], 7)
show(2)
observe([(12, 4, 1, 1, None), (11, 4, 2, 2, None)], 5)  # request 12 accepts its one: its rate is read
show(3)
