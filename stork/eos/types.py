"""What goes into the EOS and what comes out: `EstimateRequest` and `EstimateResult`.

Both are frozen values with `to_json` / `from_json`, the shape eos_server's API, the job's
`result` attributes and `stork_submit`'s estimate ad all carry.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from stork.identity import RunAs
from stork.transfer.base import Range
from stork.transfer.options import TransferOptions, parse_arguments
from stork.transfer.tokens import BearerTokens
from stork.urls import parse_url


@dataclass(frozen=True)
class EstimateRequest:
    src_url: str
    dest_url: str
    arguments: str = ""  # the job's transfer options (-p is ignored: the EOS chooses it)
    size_bytes: int | None = None
    use_history: bool = False
    x509proxy: str | None = None  # the job's proxy, for GridFTP samples
    run_as: RunAs | None = field(default=None, compare=False)  # samples run as the job's owner
    queued_since: float | None = None  # a transfer job's submission time (unix seconds)
    # a transfer job's optimization: when `size_bytes` is not given, the source's own size
    # bounds the sampling time (EOS_SAMPLING_BUDGET)
    transfer: bool = False
    # samples may be written into the real destination as byte ranges of the transfer (set
    # by the daemon for its own EOS only; never read from JSON, so no API caller can ask an
    # EOS to write into a destination)
    in_place: bool = field(default=False, compare=False)
    # the job's bearer token files, one per end (`stork.transfer.tokens`): the ends are
    # looked at with them (files only: a token's value never travels in a request)
    tokens: BearerTokens | None = field(default=None, compare=False)

    @property
    def options(self) -> TransferOptions:
        return parse_arguments(self.arguments)

    @property
    def triple_arguments(self) -> str:
        """The options that make two requests different tasks: all but the stream count."""
        o = self.options
        return TransferOptions(None, o.tcp_buffer_bytes, o.block_size_bytes,
                               o.sample_size_bytes).to_arguments()

    def hosts(self) -> tuple[str, str]:
        return parse_url(self.src_url).endpoint, parse_url(self.dest_url).endpoint

    def to_json(self) -> dict[str, Any]:
        return {"src_url": self.src_url, "dest_url": self.dest_url, "arguments": self.arguments,
                "size": self.size_bytes, "use_history": self.use_history,
                "x509proxy": self.x509proxy, "queued_since": self.queued_since,
                "transfer": self.transfer,
                **({"src_bearer_token_file": self.tokens.src,
                    "dest_bearer_token_file": self.tokens.dest} if self.tokens else {})}

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> EstimateRequest:
        """The request a JSON body asks for (KeyError, ValueError or TypeError if malformed)."""
        request = cls(str(body["src_url"]), str(body["dest_url"]), str(body.get("arguments") or ""),
                      int(body["size"]) if body.get("size") else None,
                      bool(body.get("use_history")),
                      str(body["x509proxy"]) if body.get("x509proxy") else None,
                      queued_since=(float(body["queued_since"])
                                    if body.get("queued_since") is not None else None),
                      transfer=bool(body.get("transfer")),
                      tokens=BearerTokens.of(*(str(body[k]) if body.get(k) else None for k in (
                          "bearer_token_file", "src_bearer_token_file",
                          "dest_bearer_token_file"))))
        parse_url(request.src_url)
        parse_url(request.dest_url)
        parse_arguments(request.arguments)
        return request


@dataclass(frozen=True)
class SampleDetail:
    """One sample as the answer reports it."""

    streams: int
    mbps: float
    duration_s: float = 0.0
    bytes: int = 0
    method: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"streams": self.streams, "mbps": self.mbps, "duration_s": self.duration_s,
                "bytes": self.bytes, "method": self.method}


class Source:
    """Where an answer came from (`EstimateResult.optimization_source`)."""

    SAMPLED = "sampled"  # a sampling run that ended on its own (this job's or an equal one's)
    BUDGET = "budget"  # a sampling run that EOS_SAMPLING_BUDGET stopped early
    HISTORY = "history"  # the history, without sampling
    DEFAULT = "default"  # EOS_DEFAULT_STREAMS, without sampling (no history to use)


@dataclass(frozen=True)
class EstimateResult:
    """The EOS's answer. Rates in Mbit/s (10**6 bits), times in seconds."""

    optimal_streams: int
    # for a known `size_bytes`: that file's size over `estimated_time_s` (set-up included);
    # otherwise the steady rate
    estimated_throughput_mbps: float
    model: str  # second_order, dynamic_order, best_sample; best_transfer or none unsampled
    reason: str = ""
    model_params: Mapping[str, float] = field(default_factory=dict)
    samples: tuple[tuple[int, float], ...] = ()  # (streams, Mbit/s) as measured
    sample_details: tuple[SampleDetail, ...] = ()
    sampling_time_s: float = 0.0
    sampler: str = ""
    from_history: bool = False
    shared_run: bool = False  # answered by a sampling run made for an equal request
    # only when the size is known (the request's, or the source's own)
    size_bytes: int | None = None
    setup_time_s: float | None = None
    startup_time_s: float | None = None
    steady_throughput_mbps: float | None = None
    estimated_time_s: float | None = None
    # sampled, budget, history or default (`Source`), and why; "" from an EOS that predates it
    optimization_source: str = ""
    optimization_reason: str = ""
    # for a request's own sampling run with `in_place`: whether samples went into the
    # destination, why not (scratch copies), and the byte ranges they wrote there completely
    samples_in_destination: bool | None = None
    scratch_reason: str = ""
    destination_ranges: tuple[Range, ...] = ()

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "optimal_streams": self.optimal_streams,
            "estimated_throughput_mbps": self.estimated_throughput_mbps,
            "model": self.model,
            "model_params": dict(self.model_params),
            "reason": self.reason,
            "samples": [[n, mbps] for n, mbps in self.samples],
            "sample_details": [d.to_json() for d in self.sample_details],
            "sampling_time_s": self.sampling_time_s,
            "sampler": self.sampler,
            "from_history": self.from_history,
            "shared_run": self.shared_run,
        }
        if self.size_bytes is not None:
            body.update(size_bytes=self.size_bytes, setup_time_s=self.setup_time_s,
                        startup_time_s=self.startup_time_s,
                        steady_throughput_mbps=self.steady_throughput_mbps,
                        estimated_time_s=self.estimated_time_s)
        if self.optimization_source:
            body.update(optimization_source=self.optimization_source,
                        optimization_reason=self.optimization_reason)
        if self.samples_in_destination is not None:
            body.update(samples_in_destination=self.samples_in_destination,
                        scratch_reason=self.scratch_reason,
                        destination_ranges=[list(r) for r in self.destination_ranges])
        return body

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> EstimateResult:
        """The result a JSON body holds (KeyError, ValueError or TypeError if malformed);
        keys this version does not know are ignored."""
        def number(key: str) -> float | None:
            value = body.get(key)
            return float(value) if value is not None else None

        size = body.get("size_bytes")
        return cls(
            optimal_streams=int(body["optimal_streams"]),
            estimated_throughput_mbps=float(body["estimated_throughput_mbps"]),
            model=str(body["model"]),
            reason=str(body.get("reason") or ""),
            model_params={str(k): float(v) for k, v in (body.get("model_params") or {}).items()},
            samples=tuple((int(n), float(mbps)) for n, mbps in body.get("samples") or ()),
            sample_details=tuple(
                SampleDetail(int(d["streams"]), float(d["mbps"]), float(d.get("duration_s", 0)),
                             int(d.get("bytes", 0)), str(d.get("method", "")))
                for d in body.get("sample_details") or ()),
            sampling_time_s=float(body.get("sampling_time_s") or 0.0),
            sampler=str(body.get("sampler") or ""),
            from_history=bool(body.get("from_history")),
            shared_run=bool(body.get("shared_run")),
            size_bytes=int(size) if size is not None else None,
            setup_time_s=number("setup_time_s"),
            startup_time_s=number("startup_time_s"),
            steady_throughput_mbps=number("steady_throughput_mbps"),
            estimated_time_s=number("estimated_time_s"),
            optimization_source=str(body.get("optimization_source") or ""),
            optimization_reason=str(body.get("optimization_reason") or ""),
            samples_in_destination=(bool(body["samples_in_destination"])
                                    if body.get("samples_in_destination") is not None else None),
            scratch_reason=str(body.get("scratch_reason") or ""),
            destination_ranges=tuple((int(o), int(n))
                                     for o, n in body.get("destination_ranges") or ()))

    @classmethod
    def of(cls, result: EstimateResult | Mapping[str, Any]) -> EstimateResult:
        """`result` itself, or the result its JSON form holds."""
        return result if isinstance(result, EstimateResult) else cls.from_json(result)
