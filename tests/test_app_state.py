"""ui.state: the URL encoding of the app's input (no Streamlit runtime needed)."""
import base64
import zlib

from ui.state import MAX_PARAM_CHARS, AppState, decode, encode, presets


CUSTOM_MODEL = {"id": "x", "name": "x", "layers": 2, "hidden": 64, "heads": 2, "kv_heads": 2, "ffn": 256,
                "vocab": 100}


def test_round_trip_keeps_every_field():
    state = AppState(cluster=presets()["lab-mix"], model=CUSTOM_MODEL, global_batch=7, seq_len=9,
                     precision="fp16", tokens_to_train=1e9, objective="deadline", deadline_hours=10.0,
                     plan={"stages": []})
    params = encode(state)
    assert set(params) == {"v", "s"}
    assert decode(params) == (state, [])


def test_readable_parameters_build_a_state():
    state, warnings = decode({"preset": "single-node-8", "model": "gpt3-1.3b", "batch": "64", "seq": "2048"})
    assert warnings == []
    assert (state.cluster["name"], state.model, state.global_batch, state.seq_len) == ("single-node-8", "gpt3-1.3b", 64, 2048)


def test_damaged_link_falls_back_with_a_warning():
    state, warnings = decode({"v": "1", "s": "not-base64-zlib"})
    assert state == AppState()
    assert "could not read the link" in warnings[0]


def test_foreign_version_is_refused_readably():
    state, warnings = decode({"v": "99", "s": encode(AppState())["s"]})
    assert state == AppState() and "another version" in warnings[0]


def test_oversized_and_zip_bomb_links_are_refused():
    assert "limit" in decode({"s": "A" * (MAX_PARAM_CHARS + 1)})[1][0]
    bomb = base64.urlsafe_b64encode(zlib.compress(b"[" + b"0," * 1_000_000 + b"0]")).decode()
    state, warnings = decode({"s": bomb})
    assert state == AppState() and "could not read" in warnings[0]


def test_wrong_types_are_refused():
    import json
    token = base64.urlsafe_b64encode(zlib.compress(json.dumps({"global_batch": -3}).encode())).decode()
    state, warnings = decode({"s": token})
    assert state == AppState() and "global_batch" in warnings[0]


def test_unknown_preset_warns():
    state, warnings = decode({"preset": "nope"})
    assert "unknown preset" in warnings[0]


def test_a_plan_too_large_for_a_link_raises():
    import random
    rng = random.Random(0)
    big = AppState(plan={"stages": [{"x": rng.random()} for _ in range(5000)]})
    try:
        encode(big)
    except ValueError as e:
        assert "download" in str(e)
    else:
        raise AssertionError("expected ValueError")


def test_infinite_deadline_and_long_values_give_short_warnings():
    import base64
    import zlib

    from ui import state as st
    raw = b'{"deadline_hours": 1e999}'
    token = base64.urlsafe_b64encode(zlib.compress(raw)).decode().rstrip("=")
    decoded, warnings = st.decode({"v": st.VERSION, "s": token})
    assert decoded == st.AppState() and warnings and "deadline_hours" in warnings[0]
    decoded, warnings = st.decode({"batch": "9" * 5000 + "x"})
    assert warnings and max(len(w) for w in warnings) < 300


def test_presets_are_copies():
    from ui import state as st
    a = st.presets()
    a[st.DEFAULT_PRESET]["pools"].clear()
    assert st.presets()[st.DEFAULT_PRESET]["pools"]
