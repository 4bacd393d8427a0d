"""DCQCN: the reaction point (sender) of Zhu et al., SIGCOMM 2015, with injected time.

The state machine takes ``now`` (seconds) as an argument and never reads a clock, so unit tests
drive it through exact sequences. Two parameter profiles (:data:`PROFILES`): ``paper``, [Z15]'s
at 40 Gbit/s, and ``connectx``, the defaults NVIDIA ConnectX-4 and later NICs ship with. Either
is scaled to the emulated link by ``scale = 40 Gbit/s / link rate``: times are multiplied by it,
rates divided, byte counts kept (a byte count is a rate times a time). At 10 Mbit/s, scale =
4000: the paper's 55 us timers become 220 ms and its 40 Mbit/s additive step 10 kbit/s.
"""

from __future__ import annotations

from dataclasses import dataclass, field

REFERENCE_LINK_BPS = 40e9  # [Z15] evaluated DCQCN on 40 Gbit/s links


@dataclass(frozen=True)
class DcqcnParams:
    """Reaction-point parameters (and the notification point's CNP interval). Units: bit/s,
    seconds, bytes. The defaults are [Z15]'s, unscaled."""

    line_rate_bps: float
    g: float = 1 / 256  # [Z15] alpha gain (ConnectX: ~1/205)
    alpha_period_s: float = 55e-6  # K: alpha decays every K without CNP [Z15]
    timer_period_s: float = 55e-6  # T: rate-increase timer [Z15]
    byte_counter_bytes: int = 10 * 1024 * 1024  # B [Z15]
    fast_recovery_steps: int = 5  # F [Z15]
    rai_bps: float = 40e6  # additive increase [Z15]
    rhai_bps: float = 200e6  # hyper increase [ZNS]
    min_rate_bps: float = 100e6  # floor [ZNS]
    initial_alpha: float = 1.0
    #: On a cut, the target rate takes the current rate ([Z15]: RT <- RC). ConnectX's
    #: clamp_tgt_rate, default off there: the target rate is kept on a cut, unless the rate
    #: rose since the last cut, so a QP cut again and again still aims at where it came from.
    clamp_target: bool = True
    cnp_interval_s: float = 50e-6  # N: at most one CNP per QP per N, at the receiver [Z15]

    @classmethod
    def scaled(cls, line_rate_bps: float, profile: str = "paper",
               **overrides: float) -> DcqcnParams:
        """A profile's parameters (:data:`PROFILES`), scaled from 40 Gbit/s to ``line_rate_bps``;
        ``overrides`` are taken as they are (already at the link's scale)."""
        if profile not in PROFILES:
            raise ValueError(f"unknown DCQCN profile {profile!r}; use {' or '.join(PROFILES)}")
        s = REFERENCE_LINK_BPS / line_rate_bps
        base = cls(line_rate_bps=line_rate_bps, **PROFILES[profile])  # type: ignore[arg-type]
        scaled = dict(
            alpha_period_s=base.alpha_period_s * s,
            timer_period_s=base.timer_period_s * s,
            cnp_interval_s=base.cnp_interval_s * s,
            rai_bps=base.rai_bps / s,
            rhai_bps=base.rhai_bps / s,
            min_rate_bps=base.min_rate_bps / s,
        )
        scaled.update(overrides)
        return cls(line_rate_bps=line_rate_bps,  # type: ignore[arg-type]
                   **{**PROFILES[profile], **scaled})


#: Each profile's values before scaling, over DcqcnParams' defaults ([Z15]'s).
#: ``connectx``: NVIDIA's documented defaults for ConnectX-4 and later (DOCA SDK documentation,
#: "DCQCN CC Parameters",
#: https://networking-docs.nvidia.com/doca/archive/3-4-0/dcqcn-cc-parameters,
#: earlier the Mellanox community page "DCQCN Parameters"; the same names under
#: /sys/class/net/<if>/ecn/roce_rp/ and roce_np/ with MLNX_OFED, and in mlxconfig as
#: ROCE_CC_* / RPG_* / DCE_TCP_*), in that page's units:
#:   dce_tcp_g 1019 (alpha gain g = 1 - 1019/1024), dce_tcp_rtt 1 us (alpha update period),
#:   initial_alpha_value 1023 (of 1024), rpg_time_reset 300 us (rate-increase timer),
#:   rpg_byte_reset 32767 bytes (rate-increase byte counter), rpg_threshold 1 (stages before
#:   additive increase), rpg_ai_rate 5 Mbit/s, rpg_hai_rate 50 Mbit/s, rpg_min_rate 1 Mbit/s,
#:   rpg_gd 11 (cut = alpha / 2, as [Z15]), clamp_tgt_rate 0, and at the receiver
#:   min_time_between_cnps 4 us. Not modelled: rpg_min_dec_fac (50%: a cut by alpha/2 never
#:   exceeds it) and rate_reduce_monitor_period (4 us between cuts: the CNP interval bounds it).
#: Scaled from 40 Gbit/s like the paper's, so the two compare at the same emulated link.
PROFILES: dict[str, dict] = {
    "paper": {},
    "connectx": dict(
        g=1 - 1019 / 1024, alpha_period_s=1e-6, initial_alpha=1023 / 1024,
        timer_period_s=300e-6, byte_counter_bytes=32767, fast_recovery_steps=1,
        rai_bps=5e6, rhai_bps=50e6, min_rate_bps=1e6, clamp_target=False,
        cnp_interval_s=4e-6),
}


@dataclass
class ReactionPoint:
    """Per-QP DCQCN sender state: current rate RC, target rate RT, alpha and the two counters."""

    p: DcqcnParams
    now: float = 0.0
    rc: float = field(init=False)
    rt: float = field(init=False)
    alpha: float = field(init=False)
    timer_stage: int = 0  # iT
    byte_stage: int = 0  # iB
    bytes_since: int = 0
    cnps: int = 0
    _rose_since_cut: bool = False  # RC went up since the last cut (see DcqcnParams.clamp_target)
    _last_alpha: float = field(init=False)
    _last_timer: float = field(init=False)

    def __post_init__(self) -> None:
        self.rc = self.rt = self.p.line_rate_bps
        self.alpha = self.p.initial_alpha
        self._last_alpha = self._last_timer = self.now

    # -- events -------------------------------------------------------------------------
    def on_cnp(self, now: float) -> None:
        self.advance(now)
        self.cnps += 1
        if self.p.clamp_target or self._rose_since_cut:
            self.rt = self.rc
        self._rose_since_cut = False
        self.rc = max(self.rc * (1 - self.alpha / 2), self.p.min_rate_bps)
        self.alpha = (1 - self.p.g) * self.alpha + self.p.g
        self.timer_stage = self.byte_stage = 0
        self.bytes_since = 0
        self._last_alpha = self._last_timer = now

    def on_sent(self, nbytes: int, now: float) -> None:
        p = self.p
        if now >= self._last_alpha + p.alpha_period_s or now >= self._last_timer + p.timer_period_s:
            self.advance(now)
        elif now > self.now:  # no timer due: what advance() would do, without its loops
            self.now = now
        self.bytes_since += nbytes
        while self.bytes_since >= self.p.byte_counter_bytes:
            self.bytes_since -= self.p.byte_counter_bytes
            self.byte_stage += 1
            self._increase()

    def advance(self, now: float) -> None:
        """Run the alpha and rate-increase timers up to ``now``."""
        while self._last_alpha + self.p.alpha_period_s <= now:
            self._last_alpha += self.p.alpha_period_s
            self.alpha = (1 - self.p.g) * self.alpha
        while self._last_timer + self.p.timer_period_s <= now:
            self._last_timer += self.p.timer_period_s
            self.timer_stage += 1
            self._increase()
        self.now = max(self.now, now)

    def next_increase(self) -> float:
        """When the rate-increase timer next changes the rate; never (inf) at line rate.

        At line rate a timer event only counts a stage, and a cut resets the stages, so it
        changes nothing a later call sees. Alpha's timer never needs a call of its own either:
        alpha is read only at a cut and in samples, which both :meth:`advance` first, and
        :meth:`advance` reaches the same state however late it runs.
        """
        p = self.p
        if self.rc >= p.line_rate_bps and self.rt >= p.line_rate_bps:
            return float("inf")
        return self._last_timer + p.timer_period_s

    # -- rate increase ------------------------------------------------------------------
    @property
    def phase(self) -> str:
        f = self.p.fast_recovery_steps
        if max(self.timer_stage, self.byte_stage) < f:
            return "fast_recovery"
        if min(self.timer_stage, self.byte_stage) >= f:
            return "hyper_increase"
        return "additive_increase"

    def _increase(self) -> None:
        if self.rc >= self.p.line_rate_bps and self.rt >= self.p.line_rate_bps:
            return
        phase = self.phase
        if phase == "additive_increase":
            self.rt += self.p.rai_bps
        elif phase == "hyper_increase":
            i = min(self.timer_stage, self.byte_stage) - self.p.fast_recovery_steps + 1
            self.rt += i * self.p.rhai_bps
        self.rt = min(self.rt, self.p.line_rate_bps)
        rc = min((self.rt + self.rc) / 2, self.p.line_rate_bps)
        if rc > self.rc:
            self._rose_since_cut = True
        self.rc = rc


@dataclass
class NotificationPoint:
    """Receiver side: at most one CNP per QP per ``interval_s`` while CE marks arrive."""

    interval_s: float
    _last: dict[int, float] = field(default_factory=dict)

    def should_send(self, qpn: int, now: float) -> bool:
        last = self._last.get(qpn)
        if last is not None and now - last < self.interval_s:
            return False
        self._last[qpn] = now
        return True

    @classmethod
    def scaled(cls, line_rate_bps: float, interval_s: float = 50e-6) -> NotificationPoint:
        """[Z15]'s N = 50 us (or ``interval_s``), scaled like the reaction point's timers."""
        return cls(interval_s * REFERENCE_LINK_BPS / line_rate_bps)
