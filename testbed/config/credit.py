"""Mode ib-credit's settings (config ``qos.credit``): InfiniBand's link-level credit flow control
(IBA vol. 1, 7.9) on this fabric's links, apart from :mod:`testbed.config.models` to keep each
module small; testbed.config.models re-exports it."""

from __future__ import annotations

from pydantic import Field

from testbed.config.base import _Strict

#: The most a receiver may advertise beyond what it received: 2,048 blocks of 64 bytes
#: (traffic.credits.MAX_CREDIT_BLOCKS), so a credited input's buffer is at most this.
MAX_CREDIT_BUFFER_BYTES = 2048 * 64


class CreditConfig(_Strict):
    """How the credited classes (``qos.credit_enable``, set by mode ib-credit) are flow
    controlled: a port sends such a class only while the next hop has advertised room for it in
    its buffer for the input the frames arrive on."""

    buffer_bytes: int | None = Field(
        None, ge=20_000, le=MAX_CREDIT_BUFFER_BYTES, description="Receive buffer per (input "
        "port, credited class): what a port may have in flight toward it and in it. Left out: "
        "a PFC switch's share of one ingress port at the link's rate (XOFF + headroom, as "
        "qos.pfc derives them), so that modes ib-credit and roce-lossless hold alike, at most "
        "the 2,048 blocks of 64 bytes IB's credit limit can reach ahead (131,072 bytes). "
        "Real: an IB switch port's buffer per virtual lane.")
    period_ms: float = Field(
        10.0, gt=0, le=1000, description="How often every port sends its flow control "
        "packets (the credit limit of each credited class, IBA 7.9's FCCL): a transmitter "
        "sees room only this late after the buffer drains. Real: IB ports send them as "
        "credits free up, and at least periodically, in hardware.")
