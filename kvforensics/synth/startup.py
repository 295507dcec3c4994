"""Startup lines of a prefill-node scheduler rank: server arguments, memory sizes, the
fork's checkpoint alignment, and a few lines no format describes (as real logs have)."""

from __future__ import annotations

from dataclasses import dataclass

from kvforensics.model import Config
from kvforensics.synth.clock import Clock


@dataclass(frozen=True)
class Startup:
    """What the startup lines say beyond the model's Config."""

    args_time: str = "2026-11-02 09:00:12"
    ready_time: str = "2026-11-02 09:03:41"
    model_path: str = "/models/kimi-k3"
    tp_size: int = 8
    pp_size: int = 4
    max_running_requests: int = 256
    context_len: int = 1048576
    available_gpu_mem: str = "12.31 GB"
    align_backend: str = "FlashKDA"


def server_args(cfg: Config, st: Startup) -> str:
    pairs = [
        ("model_path", repr(st.model_path)),
        ("tokenizer_path", repr(st.model_path)),
        ("tokenizer_mode", "'auto'"),
        ("skip_tokenizer_init", "False"),
        ("load_format", "'auto'"),
        ("trust_remote_code", "True"),
        ("dtype", "'auto'"),
        ("kv_cache_dtype", "'auto'"),
        ("context_length", str(st.context_len)),
        ("device", "'cuda'"),
        ("served_model_name", "'kimi-k3'"),
        ("host", "'0.0.0.0'"),
        ("port", "30000"),
        ("mem_fraction_static", "0.88"),
        ("max_running_requests", str(st.max_running_requests)),
        ("max_total_tokens", "None"),
        ("chunked_prefill_size", str(cfg.chunked_prefill_size)),
        ("max_prefill_tokens", str(cfg.max_prefill_tokens)),
        ("schedule_policy", "'fcfs'"),
        ("schedule_conservativeness", "1.0"),
        ("page_size", str(cfg.page_size)),
        ("tp_size", str(st.tp_size)),
        ("pp_size", str(st.pp_size)),
        ("dp_size", "1"),
        ("ep_size", str(st.tp_size)),
        ("random_seed", "941377712"),
        ("log_level", "'info'"),
        ("enable_hierarchical_cache", "True"),
        ("hicache_ratio", "2.0"),
        ("hicache_write_policy", "'write_through'"),
        ("disable_radix_cache", "False"),
        ("cuda_graph_bs", "[1, 2, 4, 8, 16, 32]"),
        ("disable_cuda_graph", "False"),
        ("disaggregation_mode", "'prefill'"),
        ("disaggregation_transfer_backend", "'mooncake'"),
        ("disaggregation_bootstrap_port", "8998"),
    ]
    return "server_args=ServerArgs(" + ", ".join(f"{k}={v}" for k, v in pairs) + ")"


def memory_config(cfg: Config, st: Startup) -> str:
    return (
        f"max_total_num_tokens={cfg.pool_size}, chunked_prefill_size={cfg.chunked_prefill_size}, "
        f"max_prefill_tokens={cfg.max_prefill_tokens}, "
        f"max_running_requests={st.max_running_requests}, context_len={st.context_len}, "
        f"available_gpu_mem={st.available_gpu_mem}"
    )


def startup_lines(cfg: Config, rank: str, st: Startup = Startup()) -> list[str]:
    a = Clock.at(st.args_time).prefix(0, rank)
    r = Clock.at(st.ready_time).prefix(0, rank)
    out = [
        a + server_args(cfg, st),
        # not in the catalogue: ordinary startup noise a reader must step over
        a + "Init torch distributed begin.",
        a + "Load weight begin. avail mem=139.21 GB",
        r + "Load weight end. type=KimiK3ForCausalLM, dtype=torch.bfloat16, "
        "avail mem=27.52 GB, mem usage=111.69 GB.",
        r + memory_config(cfg, st),
    ]
    if cfg.align_size and rank.endswith("PP0"):
        out.append(r + f"Prefill checkpoint end align size: {cfg.align_size} ({st.align_backend})")
    return out
