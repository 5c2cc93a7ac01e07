"""Model-spec files (stalesim.workloads.model_spec): JSON and TOML to a TransformerSpec, every bad
field one line naming it, bounds checked before anything is built."""

import json
import os

import pytest

from stalesim.errors import StalesimError
from stalesim.workloads.model_spec import MAX_SPEC_BYTES, SPEC_FIELDS, load_model_spec, spec_from_mapping
from stalesim.workloads.transformer import PRESETS, TransformerSpec

SHAPE = {"name": "my-22b", "layers": 48, "hidden": 6144, "heads": 48, "kv_heads": 8, "ffn": 16384,
         "ffn_type": "swiglu", "vocab": 65536, "seq": 4096, "norm": "rmsnorm", "bias": False,
         "tied_embeddings": False, "dropout": False, "attention": "flash", "learned_positions": False}
TOML = """name = "my-22b"
layers = 48
hidden = 6144
heads = 48
kv_heads = 8
ffn = 16384
ffn_type = "swiglu"
vocab = 65536
seq = 4096
norm = "rmsnorm"
bias = false
tied_embeddings = false
dropout = false
attention = "flash"
learned_positions = false
"""


def _write(tmp_path, text, name="spec.json"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_json_and_toml_give_the_same_spec_with_its_counts(tmp_path):
    a = load_model_spec(_write(tmp_path, json.dumps(SHAPE)))
    b = load_model_spec(_write(tmp_path, TOML, "spec.toml"))
    assert a == b == TransformerSpec(**SHAPE)
    # the shape's own counts: 48 x (QKV 6144 x (6144 + 2 x 1024) + out 6144^2 + 3 x 6144 x 16384 + 2 norms)
    h, k, f = 6144, 1024, 16384
    layer = h * (h + 2 * k) + h * h + 3 * h * f + 2 * h
    assert a.params() == 48 * layer + 65536 * h + h + 65536 * h


def test_every_field_has_a_file_type_and_defaults_follow_the_dataclass(tmp_path):
    assert set(SPEC_FIELDS) == {"name", "layers", "hidden", "heads", "kv_heads", "ffn", "ffn_type", "seq", "vocab",
                                "dtype", "norm", "bias", "tied_embeddings", "learned_positions", "dropout",
                                "attention"}
    s = load_model_spec(_write(tmp_path, '{"layers": 2, "hidden": 64, "heads": 4}', "tiny.json"))
    assert s.name == "tiny" and s.ffn_dim == 256 and s.n_kv_heads == 4 and s.ffn_type == "gelu"


def test_base_preset_with_overrides():
    s = spec_from_mapping({"base": "llama3.1-405b", "layers": 70, "seq": 4096})
    assert s == PRESETS["llama3.1-405b"].with_(layers=70, seq=4096, name="llama3.1-405b-custom")


@pytest.mark.parametrize("text,needle", [
    ('{"layers": 2, "hidden": 64, "heads": 4, "hiden": 5}', "hiden: not a model-spec field"),
    ('{"layers": "2", "hidden": 64, "heads": 4}', "layers: expected an integer, got '2'"),
    ('{"layers": true, "hidden": 64, "heads": 4}', "layers: expected an integer, got True"),
    ('{"layers": 2.5, "hidden": 64, "heads": 4}', "2.5 in spec.json: every field is an integer"),
    ('{"layers": NaN, "hidden": 64, "heads": 4}', "NaN in spec.json is not a value"),
    ('{"layers": 2, "hidden": 64, "heads": 4, "bias": 1}', "bias: expected true or false, got 1"),
    ('{"layers": 2, "hidden": 64, "heads": {"q": 4}}', "heads: expected an integer, got a table"),
    ('{"layers": 2, "hidden": 64, "heads": 4, "norm": ["rmsnorm"]}', "norm: expected a string, got a list"),
    ('{"layers": 2, "hidden": 64, "heads": 4, "norm": "batchnorm"}', "norm: expected one of layernorm, rmsnorm"),
    ('{"layers": 2, "hidden": 64, "heads": 5}', "hidden: 64 is not divisible by heads 5"),
    ('{"layers": 2, "hidden": 64, "heads": 4, "kv_heads": 3}', "kv_heads: 3 must be >= 1 and divide heads 4"),
    ('{"layers": 2, "hidden": 64, "heads": 4, "ffn": 0}', "ffn: expected an integer >= 1, got 0"),
    ('{"layers": 20000000, "hidden": 64, "heads": 4}', "layers: 20000000 is larger than this tool handles"),
    ('{"layers": 1' + "0" * 40 + ', "hidden": 64, "heads": 4}', "an integer of 41 digits"),
    ('{"hidden": 64, "heads": 4}', "layers: required in a model spec"),
    ('{"base": "gpt-9"}', "workload: unknown 'gpt-9'"),
    ('[1, 2]', "model_spec: expected one table of fields, got list"),
    ('{"layers": 2,', "model_spec: spec.json is not valid JSON"),
    ("[" * 100_000 + "]" * 100_000, "model_spec: spec.json is 200,000 bytes"),
    ("[" * 30_000 + "]" * 30_000, "model_spec: spec.json nests too deeply"),
])
def test_bad_fields_are_one_line_errors_naming_the_field(tmp_path, text, needle):
    p = _write(tmp_path, text)
    with pytest.raises(StalesimError) as exc:
        load_model_spec(p)
    assert needle in str(exc.value) and "\n" not in str(exc.value)


@pytest.mark.parametrize("text,needle", [
    ("layers = 2\nhidden = 64\nheads = 4.0\n", "4.0 in spec.toml: every field is an integer"),
    ("layers = 2\nhidden = 64\n[heads]\nq = 4\n", "heads: expected an integer, got a table"),
    ("layers = 2\nhidden = 64\nheads = 4\nvocab = 1" + "0" * 5000 + "\n", "too long"),
    ("layers = \n", "model_spec: spec.toml is not valid TOML"),
])
def test_bad_toml_is_one_line(tmp_path, text, needle):
    with pytest.raises(StalesimError) as exc:
        load_model_spec(_write(tmp_path, text, "spec.toml"))
    assert needle in str(exc.value) and "\n" not in str(exc.value)


def test_huge_unreadable_and_binary_files_are_refused_before_parsing(tmp_path):
    big = _write(tmp_path, '{"layers": 2, "hidden": 64, "heads": 4, "name": "' + "x" * MAX_SPEC_BYTES + '"}')
    with pytest.raises(StalesimError, match="model_spec: spec.json is [0-9,]+ bytes; a model spec is at most"):
        load_model_spec(big)
    with pytest.raises(StalesimError, match="model_spec: cannot read missing.json"):
        load_model_spec(tmp_path / "missing.json")
    os.mkfifo(tmp_path / "fifo.json")  # opening it would block forever
    with pytest.raises(StalesimError, match="model_spec: fifo.json is not a regular file"):
        load_model_spec(tmp_path / "fifo.json")
    with pytest.raises(StalesimError, match="model_spec: .* is not a regular file"):
        load_model_spec(tmp_path)
    (tmp_path / "bin.json").write_bytes(b"\xff\xfe{")
    with pytest.raises(StalesimError, match="model_spec: bin.json is not UTF-8"):
        load_model_spec(tmp_path / "bin.json")
    with pytest.raises(StalesimError, match="name: expected a printable string"):
        spec_from_mapping({"name": "a\nb", "layers": 2, "hidden": 64, "heads": 4})
