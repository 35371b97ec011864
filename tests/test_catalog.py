"""The packaged catalog: parameter counts against released checkpoints, GPU sanity, file validation."""
from __future__ import annotations

import dataclasses
import pickle
import textwrap

import pytest

from catalog import load_catalog
from catalog.schema import ModelEntry
from planner.flops import model_params
from planner.types import GIB, InputError, Model

# Published parameter totals of released checkpoints: the safetensors total shown on each model's
# Hugging Face page (e.g. huggingface.co/meta-llama/Llama-2-7b-hf: "Model size 6.74B params"),
# the figures in /work/shared/reference/models.csv's notes and the lead's verified counts.
EXACT_PARAMS = {
    "opt-350m": 331_196_416,          # facebook/opt-350m
    "gpt-neo-2.7b": 2_651_307_520,    # EleutherAI/gpt-neo-2.7B
    "llama-2-7b": 6_738_415_616,      # meta-llama/Llama-2-7b-hf
    "llama-2-13b": 13_015_864_320,    # meta-llama/Llama-2-13b-hf
    "llama-2-70b": 68_976_648_192,    # meta-llama/Llama-2-70b-hf
    "llama-3-8b": 8_030_261_248,      # meta-llama/Meta-Llama-3-8B
    "llama-3-70b": 70_553_706_496,    # meta-llama/Meta-Llama-3-70B
    "llama-3.1-405b": 405_853_388_800,  # meta-llama/Llama-3.1-405B
    "mistral-7b": 7_241_732_096,      # mistralai/Mistral-7B-v0.1
    "mixtral-8x7b": 46_702_792_704,   # mistralai/Mixtral-8x7B-v0.1
    "qwen2.5-7b": 7_615_616_512,      # Qwen/Qwen2.5-7B
    "qwen2.5-72b": 72_706_203_648,    # Qwen/Qwen2.5-72B
    "bloom-176b": 176_247_271_424,    # bigscience/bloom
}

# Nominal sizes without a released checkpoint (GPT-3: Brown et al. 2020, Table 2.1) or quoted
# rounded (OPT-30B: Zhang et al. 2022, Table 1): within 2%.
NOMINAL_PARAMS = {
    "gpt3-1.3b": 1.3e9, "gpt3-2.7b": 2.7e9, "gpt3-6.7b": 6.7e9, "gpt3-13b": 13e9,
    "gpt3-175b": 175e9, "opt-30b": 30e9,
}
NOMINAL_TOLERANCE = 0.02

NEW_GPU_IDS = ("gb200 b300 gb300 h20 l20 rtx-5090 rtx-pro-6000-server mi325x mi355x gaudi3").split()   # issue 11
GPU_IDS = ("h100-sxm h100-pcie h200-sxm gh200 b200 a100-80gb-sxm a100-40gb-sxm a100-80gb-pcie a10g a10 l4 "
           "l40s v100-32gb-sxm v100-16gb-pcie t4 rtx-4090 rtx-3090 rtx-2080-ti titan-rtx mi250x mi300x").split() \
    + NEW_GPU_IDS
NO_BF16 = ("v100-32gb-sxm", "v100-16gb-pcie", "t4", "rtx-2080-ti", "titan-rtx")

# FP8 tensor cores: Hopper, Ada, Blackwell, AMD CDNA3/CDNA4, Gaudi 3. Not Volta, Turing, Ampere, CDNA2.
HAS_FP8 = set("h100-sxm h100-pcie h200-sxm gh200 h20 b200 gb200 b300 gb300 l4 l40s l20 rtx-4090 rtx-5090 "
              "rtx-pro-6000-server mi300x mi325x mi355x gaudi3".split())
# No TF32: Volta and Turing (before Ampere), AMD CDNA2 (mi250x) and CDNA4 (mi355x: no TF32/XF32 in its datasheet).
NO_TF32 = set("v100-32gb-sxm v100-16gb-pcie t4 rtx-2080-ti titan-rtx mi250x mi355x".split())

# Dense bf16/fp16 peaks, TFLOP/s. Rows of /work/shared/reference/gpus.csv (bf16_fp16_dense_tflops; "?" there
# on a10g, rtx-3090, rtx-2080-ti, titan-rtx, resolved in catalog/gpus.yaml's comments) ...
GPUS_CSV_BF16 = {"v100-32gb-sxm": 125, "v100-16gb-pcie": 112, "t4": 65, "a10g": 70, "a10": 125, "l4": 121,
                 "l40s": 362, "a100-40gb-sxm": 312, "a100-80gb-sxm": 312, "a100-80gb-pcie": 312, "h100-sxm": 989,
                 "h100-pcie": 756, "h200-sxm": 989, "gh200": 989, "b200": 2250, "rtx-4090": 165, "rtx-3090": 71,
                 "rtx-2080-ti": 54, "titan-rtx": 130, "mi250x": 383, "mi300x": 1307}
# ... and, for the GPUs gpus.csv has no row for, the vendor's published figure (sparse halved; GeForce:
# fp32 accumulate): GB200 NVL72 datasheet 10 PF* per 2-GPU superchip; HGX B300 36 PF* per 8 GPUs; GB300
# NVL72 360 PF* per 72; H20 and L20 spec sheets; RTX Blackwell whitepaper (5090, 209.5); RTX PRO 6000
# third-party tables (503.8, from NVIDIA's 4000 AI TOPS); AMD MI325X and MI355X datasheets; Intel Gaudi 3
# white paper (1835).
VENDOR_BF16 = {"gb200": 2500, "b300": 2250, "gb300": 2500, "h20": 148, "l20": 119.5, "rtx-5090": 209.5,
               "rtx-pro-6000-server": 503.8, "mi325x": 1307.4, "mi355x": 2516.6, "gaudi3": 1835}
BF16_TOLERANCE = 0.01      # datasheets round ("2.5 PFLOPS"); the catalog takes NVIDIA's round 500 for 503.8

# measured_matmul.csv (stas00/ml-engineering): best measured matmul / dense peak.
# measured_matmul.csv (refreshed at stas00/ml-engineering@744d01e): best measured bf16 matmul / the catalog's peak
MEASURED_EFFICIENCY = {"a100-80gb-sxm": 0.869, "h100-sxm": 0.803, "b200": 0.776, "mi300x": 0.511,
                       "a100-80gb-pcie": 0.811, "gh200": 0.838, "h200-sxm": 0.803, "b300": 0.786, "gb200": 0.729,
                       "mi325x": 0.600, "mi355x": 0.622, "gaudi3": 0.677}
# ... and its fp8 rows over the catalog's FP8 peak
MEASURED_FP8_EFFICIENCY = {"h100-sxm": 0.709, "h200-sxm": 0.734, "gh200": 0.776, "b200": 0.763, "b300": 0.745,
                           "gb200": 0.723, "gaudi3": 0.703}

NETWORK_IDS = ("nvlink2 nvlink3 nvlink4 nvlink5 pcie3 pcie4 pcie5 pcie6 xgmi ib-hdr ib-ndr eth-10g eth-25g "
               "eth-40g eth-50g roce-100g roce-200g roce-400g").split()


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


# ----------------------------------------------------------------------------- models

@pytest.mark.parametrize("model_id,expected", EXACT_PARAMS.items())
def test_param_count_equals_released_checkpoint(catalog, model_id, expected):
    assert model_params(catalog.models[model_id]) == expected


@pytest.mark.parametrize("model_id,nominal", NOMINAL_PARAMS.items())
def test_param_count_near_nominal_size(catalog, model_id, nominal):
    assert model_params(catalog.models[model_id]) == pytest.approx(nominal, rel=NOMINAL_TOLERANCE)


def test_mixtral_active_params(catalog):
    # Mistral AI, "Mixtral of experts" (2024): 13B active parameters per token (12.9B).
    assert model_params(catalog.models["mixtral-8x7b"], active_only=True) == pytest.approx(12.9e9, rel=0.01)


def test_every_model_has_a_source_and_its_key_as_id(catalog):
    for key, m in catalog.models.items():
        assert m.id == key and m.source and m.name


def test_model_schema_has_exactly_the_model_fields():
    dataclass_fields = {f.name for f in dataclasses.fields(Model)} - {"id"}
    assert set(ModelEntry.model_fields) == dataclass_fields


# ----------------------------------------------------------------------------- GPUs

@pytest.mark.parametrize("gpu_id", GPU_IDS)
def test_gpu_present_with_sane_fields(catalog, gpu_id):
    g = catalog.gpus[gpu_id]
    assert 10e12 <= g.peak_flops <= 3000e12
    assert g.peak_fp32_flops < g.peak_flops
    assert 8 * GIB <= g.mem_bytes <= 300 * GIB
    assert 100e9 <= g.mem_bw_bytes_per_s <= 10e12
    assert 10e9 <= g.link_bw_bytes_per_s <= 1000e9
    assert g.link_kind in ("nvlink2", "nvlink3", "nvlink4", "nvlink5", "pcie", "xgmi", "roce-200g")
    assert 3 <= g.pcie_gen <= 6 and 50 <= g.power_w <= 1400
    assert 0 < g.price_per_hour_usd < 20 and g.price_date and g.price_source
    assert 0.3 <= g.efficiency <= 0.9 and g.efficiency_note and g.source
    assert g.supports_bf16 == (gpu_id not in NO_BF16)


@pytest.mark.parametrize("gpu_id", NEW_GPU_IDS)
def test_new_gpu_loads_with_sources(catalog, gpu_id):
    g = catalog.gpus[gpu_id]
    assert g.source and g.price_source and g.efficiency_note
    assert g.price_source.startswith("estimate")          # prices.csv has no row for any of them
    # measured_matmul.csv has gb200, b300, mi325x, mi355x and gaudi3 since its refresh; the others are estimates
    assert g.efficiency_note.startswith("measured_matmul.csv" if gpu_id in MEASURED_EFFICIENCY else "estimate")
    assert g.vendor == {"mi325x": "amd", "mi355x": "amd", "gaudi3": "intel"}.get(gpu_id, "nvidia")


def test_fp8_only_where_the_architecture_has_it(catalog):
    assert {k for k, g in catalog.gpus.items() if g.peak_fp8_flops > 0} == HAS_FP8


def test_tf32_on_ampere_and_later(catalog):
    assert {k for k, g in catalog.gpus.items() if g.peak_tf32_flops == 0} == NO_TF32


@pytest.mark.parametrize("gpu_id", GPU_IDS)
def test_peaks_ordered_fp8_bf16_tf32_fp32(catalog, gpu_id):
    # Each narrower format runs at least as fast on the same tensor cores (Gaudi 3: fp8 = bf16; GeForce
    # and L20: tf32 = the plain fp32 rate).
    g = catalog.gpus[gpu_id]
    if g.peak_fp8_flops:
        assert g.peak_fp8_flops >= g.peak_flops
    if g.peak_tf32_flops:
        assert g.peak_flops >= g.peak_tf32_flops >= g.peak_fp32_flops


@pytest.mark.parametrize("gpu_id,tflops", {**GPUS_CSV_BF16, **VENDOR_BF16}.items())
def test_bf16_peak_matches_published(catalog, gpu_id, tflops):
    assert catalog.gpus[gpu_id].peak_flops == pytest.approx(tflops * 1e12, rel=BF16_TOLERANCE)


def test_units_converted_to_si(catalog):
    a100 = catalog.gpus["a100-80gb-sxm"]      # gpus.csv: 312 TFLOP/s, 80 GB, 2039 GB/s, 300 GB/s NVLink3
    assert a100.peak_flops == 312e12 and a100.mem_bytes == 80 * GIB
    assert a100.mem_bw_bytes_per_s == 2039e9 and a100.link_bw_bytes_per_s == 300e9


@pytest.mark.parametrize("gpu_id,efficiency", MEASURED_EFFICIENCY.items())
def test_efficiency_from_measured_matmul(catalog, gpu_id, efficiency):
    assert catalog.gpus[gpu_id].efficiency == efficiency


@pytest.mark.parametrize("gpu_id,efficiency", MEASURED_FP8_EFFICIENCY.items())
def test_fp8_efficiency_from_measured_matmul(catalog, gpu_id, efficiency):
    assert catalog.gpus[gpu_id].fp8_efficiency == efficiency


def test_unmeasured_fp8_and_attention_follow_one_rule(catalog):
    # every FP8 GPU without an fp8 row: bf16 efficiency x 0.966 (planner.compute.UNMEASURED_FP8_OVER_BF16);
    # every GPU names the measured attention kernels it takes, or says it has none
    from planner.compute import UNMEASURED_FP8_OVER_BF16, matmul_efficiency
    for gpu_id, g in catalog.gpus.items():
        if g.peak_fp8_flops and gpu_id not in MEASURED_FP8_EFFICIENCY:
            assert g.fp8_efficiency == 0
            assert matmul_efficiency(g, fp8=True) == pytest.approx(g.efficiency * UNMEASURED_FP8_OVER_BF16)
    assert {k for k, g in catalog.gpus.items() if g.attention_kernels_of == k} == {"a100-80gb-sxm", "h100-sxm"}


def test_estimated_efficiency_not_above_best_measured(catalog):
    ceiling = max(MEASURED_EFFICIENCY.values())
    assert all(g.efficiency <= ceiling for g in catalog.gpus.values())


# ----------------------------------------------------------------------------- networks

@pytest.mark.parametrize("network_id", NETWORK_IDS)
def test_network_present(catalog, network_id):
    n = catalog.networks[network_id]
    assert n.kind in ("intra-node", "inter-node") and n.source
    assert 1e9 <= n.bw_bytes_per_s <= 1000e9 and 0 <= n.latency_s <= 100e-6


def test_network_gbps_to_bytes(catalog):
    assert catalog.networks["ib-ndr"].bw_bytes_per_s == 400e9 / 8
    assert catalog.networks["eth-10g"].bw_bytes_per_s == 10e9 / 8


def test_gpu_link_kinds_match_networks(catalog):
    for g in catalog.gpus.values():
        kind = f"pcie{g.pcie_gen}" if g.link_kind == "pcie" else g.link_kind
        assert kind in catalog.networks, g.id


# ----------------------------------------------------------------------------- loading

def test_builtin_load_is_cached_and_read_only(catalog):
    assert load_catalog() is catalog
    with pytest.raises(TypeError):
        catalog.gpus["x"] = catalog.gpus["t4"]


def test_catalog_pickles(catalog):
    again = pickle.loads(pickle.dumps(catalog))
    assert again.models == catalog.models and again.gpus == catalog.gpus


GPU_FIELDS = """\
    name: My Accelerator
    bf16_fp16_tflops: 200
    fp32_tflops: 50
    bf16: true
    memory_gib: 48
    memory_bw_gb_s: 1200
    link: pcie
    link_gb_s_per_direction: 32
    pcie_gen: 4
    power_w: 300
    price_per_gpu_hour: 1.5
"""


def extra_gpu_file(tmp_path, name="mine.yaml", gpu_id="my-gpu", override=""):
    fields = textwrap.dedent(GPU_FIELDS)
    if override:
        key = override.split(":")[0]
        fields = "".join(line for line in fields.splitlines(True) if not line.startswith(key + ":")) + override
    path = tmp_path / name
    path.write_text(f"gpus:\n  {gpu_id}:\n" + textwrap.indent(fields, "    "))
    return path


def test_user_file_adds_gpu_and_model(tmp_path, catalog):
    gpu_file = extra_gpu_file(tmp_path)
    model_file = write(tmp_path, "models.yaml", """\
        models:
          tiny:
            name: Tiny
            layers: 2
            hidden: 64
            heads: 4
            kv_heads: 4
            ffn: 256
            vocab: 1000
    """)
    extended = load_catalog([gpu_file, model_file])
    assert extended.gpus["my-gpu"].peak_flops == 200e12
    assert extended.gpus["my-gpu"].mem_bytes == 48 * GIB
    assert extended.models["tiny"].layers == 2
    assert extended.models["llama-2-7b"] is catalog.models["llama-2-7b"]
    assert "my-gpu" not in load_catalog().gpus     # the built-in catalog is untouched


def test_unknown_lookup_suggests_close_matches(catalog):
    with pytest.raises(InputError, match="a100-80gb-sxm"):
        catalog.gpu("a100-80gb")


@pytest.mark.parametrize("override,field,message", [
    ("memory_gib: -3\n", "gpus.my-gpu.memory_gib", "must be a positive number of at least 0.01, got -3"),
    ("memory_gibs: 3\n", "gpus.my-gpu.memory_gibs", "unknown key"),
    ("power_w: '300'\n", "gpus.my-gpu.power_w", "must be a finite number"),
    ("efficiency: 1.5\n", "gpus.my-gpu.efficiency", "at most 1"),
    ("bf16_fp16_tflops: .nan\n", "gpus.my-gpu.bf16_fp16_tflops", "finite"),
])
def test_bad_gpu_entry_names_file_and_field(tmp_path, override, field, message):
    path = extra_gpu_file(tmp_path, "my_gpus.yaml", override=override)
    with pytest.raises(InputError) as e:
        load_catalog([path])
    assert e.value.field == f"{path}: {field}"
    assert message in str(e.value) and "\n" not in str(e.value)


def test_missing_required_field(tmp_path):
    path = write(tmp_path, "m.yaml", "gpus:\n  g:\n    name: G\n")
    with pytest.raises(InputError, match=r"gpus\.g\.bf16_fp16_tflops: is required"):
        load_catalog([path])


def test_model_type_check_reported_at_file_path(tmp_path):
    path = write(tmp_path, "m.yaml", """\
        models:
          odd:
            {name: Odd, layers: 2, hidden: 100, heads: 3, kv_heads: 3, ffn: 400, vocab: 10}
    """)
    with pytest.raises(InputError) as e:
        load_catalog([path])
    assert e.value.field == f"{path}: models.odd.hidden" and "divisible by heads" in str(e.value)


def test_bad_yaml_reports_line(tmp_path):
    path = write(tmp_path, "bad.yaml", "gpus:\n  g:\n    name: [unclosed\n    x: 1\n")
    with pytest.raises(InputError, match=r"bad\.yaml: invalid YAML at line \d+") as e:
        load_catalog([path])
    assert "\n" not in str(e.value)


def test_missing_file(tmp_path):
    with pytest.raises(InputError, match="nope.yaml: file not found"):
        load_catalog([tmp_path / "nope.yaml"])


@pytest.mark.parametrize("text,match", [
    ("- a\n- b\n", "mapping"),
    ("networks: {}\n", "networks: unknown key"),
    ("gpus: 3\n", "gpus: must be a valid dictionary"),
])
def test_bad_top_level(tmp_path, text, match):
    with pytest.raises(InputError, match=match):
        load_catalog([write(tmp_path, "x.yaml", text)])


def test_redefining_builtin_id_refused(tmp_path):
    with pytest.raises(InputError, match=r"gpus\.t4: 't4' is already in the catalog"):
        load_catalog([extra_gpu_file(tmp_path, gpu_id="t4")])


def test_repeated_key_refused(tmp_path):
    path = write(tmp_path, "dup.yaml", "gpus:\n  g:\n    name: A\n    name: B\n")
    with pytest.raises(InputError, match=r"invalid YAML at line 4: key 'name' appears twice"):
        load_catalog([path])


def test_yaml_is_loaded_safely(tmp_path):
    path = write(tmp_path, "evil.yaml", "gpus: !!python/object/apply:os.system ['true']\n")
    with pytest.raises(InputError, match="invalid YAML"):
        load_catalog([path])


# Published totals of the MoE catalog models, in billions: (total, active), each with its source in
# catalog/models.yaml. Rounded figures: 2% tolerance (Llama 4 Scout's 109B includes its vision
# encoder, which the text model here leaves out: 107.8B).
MOE_PUBLISHED = {
    "mixtral-8x22b": (141, 39),        # Mistral AI, 2024
    "qwen3-30b-a3b": (30.5, 3.3),      # Qwen3 Technical Report, Table 2
    "qwen3-235b-a22b": (235, 22),      # Qwen3 Technical Report, Table 2
    "deepseek-v3": (671, 37),          # DeepSeek-V3 Technical Report, section 1
    "llama-4-scout": (109, 17),        # Meta, "The Llama 4 herd"
    "llama-4-maverick": (400, 17),     # Meta, "The Llama 4 herd"
}


@pytest.mark.parametrize("model_id", sorted(MOE_PUBLISHED))
def test_moe_models_match_published_totals(model_id):
    model = load_catalog().model(model_id)
    total, active = MOE_PUBLISHED[model_id]
    assert model_params(model) / 1e9 == pytest.approx(total, rel=0.02)
    assert model_params(model, active_only=True) / 1e9 == pytest.approx(active, rel=0.02)
    assert model.is_moe and model.moe_layers > 0


def test_moe_layer_counts_and_latent_attention():
    catalog = load_catalog()
    assert catalog.model("deepseek-v3").moe_layers == 58                  # 61 layers, the first 3 dense
    assert catalog.model("llama-4-maverick").moe_layers == 24             # every other layer
    assert catalog.model("llama-4-scout").moe_layers == 48
    assert catalog.model("deepseek-v3").is_mla and not catalog.model("mixtral-8x22b").is_mla
    # dense models are unchanged by the MoE fields: Llama 2 7B's 6.74B (Touvron et al. 2023)
    assert model_params(catalog.model("llama-2-7b")) == pytest.approx(6.738e9, rel=1e-3)
