"""lab/model/build.sh builds the tiny offline test model once per recipe, and its builder is reproducible.

The checks run in the model's own venv (.cache/model-venv), which holds tokenizers, safetensors and numpy; no
container and no vLLM are needed.
"""

import hashlib
import json
import subprocess

import pytest
from conftest import REPO

BUILD = REPO / "lab" / "model" / "build.sh"
BUILDER = REPO / "lab" / "model" / "build_tiny_model.py"
MODEL = REPO / ".cache" / "models" / "tiny-llama"
VENV_PYTHON = REPO / ".cache" / "model-venv" / "bin" / "python"
WHEELHOUSE = REPO / ".cache" / "wheelhouse" / "lab"

# Runs in the model venv: what vLLM will read from the model directory, as JSON.
INSPECT = """
import json, sys
from safetensors import safe_open
from tokenizers import Tokenizer

model = sys.argv[1]
with safe_open(model + "/model.safetensors", framework="numpy") as weights:
    tensors = {name: [list(weights.get_slice(name).get_shape()), weights.get_slice(name).get_dtype()]
               for name in weights.keys()}
    metadata = weights.metadata()
tokenizer = Tokenizer.from_file(model + "/tokenizer.json")
sentence = "The quick brown fox asked the model server a question, and it answered 42 times!"
encoding = tokenizer.encode(sentence)
print(json.dumps({
    "tensors": tensors,
    "metadata": metadata,
    "vocab_size": tokenizer.get_vocab_size(),
    "special": {token: tokenizer.token_to_id(token) for token in ["<s>", "</s>", "<pad>", "<unk>"]},
    "sentence": sentence,
    "ids": encoding.ids,
    "decoded": tokenizer.decode(encoding.ids, skip_special_tokens=True),
}))
"""


def run(*args):
    return subprocess.run([str(arg) for arg in args], cwd=REPO, text=True, capture_output=True, check=False)


def digests(directory):
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(directory.iterdir()) if path.is_file() and path.name != ".recipe"}


@pytest.fixture(scope="module")
def model():
    if not WHEELHOUSE.is_dir():
        pytest.skip("no lab wheelhouse at .cache/wheelhouse/lab: run make wheelhouse")
    built = run(BUILD)
    assert built.returncode == 0, built.stdout + built.stderr
    return MODEL


def expected_shapes(config):
    hidden, heads, kv_heads = config["hidden_size"], config["num_attention_heads"], config["num_key_value_heads"]
    head_dim = config.get("head_dim", hidden // heads)
    intermediate, vocab = config["intermediate_size"], config["vocab_size"]
    shapes = {
        "model.embed_tokens.weight": [vocab, hidden],
        "model.norm.weight": [hidden],
        "lm_head.weight": [vocab, hidden],
    }
    for layer in range(config["num_hidden_layers"]):
        prefix = "model.layers.%d." % layer
        shapes.update({
            prefix + "self_attn.q_proj.weight": [heads * head_dim, hidden],
            prefix + "self_attn.k_proj.weight": [kv_heads * head_dim, hidden],
            prefix + "self_attn.v_proj.weight": [kv_heads * head_dim, hidden],
            prefix + "self_attn.o_proj.weight": [hidden, heads * head_dim],
            prefix + "mlp.gate_proj.weight": [intermediate, hidden],
            prefix + "mlp.up_proj.weight": [intermediate, hidden],
            prefix + "mlp.down_proj.weight": [hidden, intermediate],
            prefix + "input_layernorm.weight": [hidden],
            prefix + "post_attention_layernorm.weight": [hidden],
        })
    return shapes


def test_model_matches_its_config(model):
    config = json.loads((model / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert config["model_type"] == "llama"
    assert config["torch_dtype"] == "float32"
    assert config["tie_word_embeddings"] is False
    # vLLM's CPU attention kernel fails at the first request below 32.
    assert config["hidden_size"] // config["num_attention_heads"] >= 32
    assert config.get("head_dim", 32) == config["hidden_size"] // config["num_attention_heads"]

    inspected = run(VENV_PYTHON, "-c", INSPECT, model)
    assert inspected.returncode == 0, inspected.stderr
    found = json.loads(inspected.stdout)
    assert {name: entry[0] for name, entry in found["tensors"].items()} == expected_shapes(config)
    assert {entry[1] for entry in found["tensors"].values()} == {"F32"}
    assert found["metadata"] == {"format": "pt"}

    assert found["vocab_size"] == config["vocab_size"] == 2048
    special = found["special"]
    assert (special["<s>"], special["</s>"], special["<pad>"]) == (
        config["bos_token_id"], config["eos_token_id"], config["pad_token_id"])
    assert special["<unk>"] is not None
    assert found["ids"][0] == config["bos_token_id"]
    assert found["decoded"] == found["sentence"]

    tokenizer_config = json.loads((model / "tokenizer_config.json").read_text())
    assert tokenizer_config["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert "add_generation_prompt" in tokenizer_config["chat_template"]
    assert "messages" in tokenizer_config["chat_template"]


def test_second_build_is_a_no_op(model):
    recipe = (model / ".recipe").read_text()
    before = {path.name: path.stat().st_mtime_ns for path in model.iterdir()}

    again = run(BUILD)

    assert again.returncode == 0, again.stderr
    assert again.stderr == ""
    assert (model / ".recipe").read_text() == recipe
    assert {path.name: path.stat().st_mtime_ns for path in model.iterdir()} == before


def test_builder_is_deterministic(model, tmp_path):
    for name in ("first", "second"):
        built = run(VENV_PYTHON, BUILDER, tmp_path / name)
        assert built.returncode == 0, built.stderr

    first, second = digests(tmp_path / "first"), digests(tmp_path / "second")
    assert set(first) == {"config.json", "generation_config.json", "model.safetensors", "special_tokens_map.json",
                          "tokenizer.json", "tokenizer_config.json"}
    assert first == second
    # The cached model came from the same recipe, so it is the same bytes.
    assert digests(model) == first
