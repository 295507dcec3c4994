"""Round specs shared by the SGLang reference (run in its own venv) and the tests."""

POSTMORTEM_ABC = {
    "page_size": 64,
    "chunked_prefill_size": 4096,
    "max_prefill_tokens": 16384,
    "max_new_tokens": 1,
    "truncation_align_size": None,
    "free": 12000,
    "evictable": 0,
    "chunked": None,
    "queue": [
        {"rid": "A", "seq_len": 1088, "device_prefix": 0, "host_hit": 0, "prefix_evictable": True},
        {"rid": "B", "seq_len": 8000, "device_prefix": 0, "host_hit": 0, "prefix_evictable": True},
        {
            "rid": "C",
            "seq_len": 6128,
            "device_prefix": 0,
            "host_hit": 6000,
            "prefix_evictable": True,
        },
    ],
}
