"""The seeds a seeded rollout derives per request: `turn_seed` samples the model; `episode_draw` is the older
per-turn key the simulated students still draw from (their faults and stated items), so committed builds and
measured runs keep their draws. No imports of our own: the rollout, the simulated providers and the micro
builds all read it."""

from __future__ import annotations

import hashlib


def turn_seed(instance_id: str, seed: int, turn: int) -> int:
    """The sampling seed of one request: a hash of (instance, episode seed, turn), below 2**31.

    Reproducible, and the same (instance, seed, turn) draws the same stream under every harness, adapter and
    prefix (common random numbers: paired comparisons and a correction's control replay share them). The
    instance is in the hash because a seed shared by every instance makes the instances one draw: a model whose
    next-token distribution is about the same on every instance then samples the same choice on all of them
    (M1 on payroll_audit, seed*1000+turn: each of the 3 seeds decided all 30 easy instances alike), and a
    bootstrap over instances counts 60 units where there are 3."""
    digest = hashlib.blake2b(f"{instance_id}\0{seed}\0{turn}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % 2**31


def episode_draw(episode_seed: int, turn: int) -> int:
    """episode seed x 1000 + turn: the request seed every instance shared before `turn_seed`. The simulated
    students draw their per-turn faults and stated items from it (sent in the call's context), so committed
    builds and measured runs keep their draws; never a sampling seed."""
    return episode_seed * 1000 + turn
