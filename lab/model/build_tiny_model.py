"""Build a tiny random-weight Llama model that vLLM CPU can serve, fully offline and byte-for-byte reproducibly.

Usage: build_tiny_model.py OUTPUT_DIR

The tokenizer is a byte-level BPE (vocab 2048) trained with `tokenizers` on a corpus generated here from a fixed
word list and a fixed seed; the weights are float32 draws from a fixed numpy seed. Needs only tokenizers,
safetensors and numpy (no torch, no transformers). head_dim is 32: vLLM's CPU attention kernel refuses anything
below 32 at the first request, not at start-up.
"""

import itertools
import json
import os
import random
import sys

import numpy as np
from safetensors.numpy import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

SEED = 20261130
VOCAB_SIZE = 2048
HIDDEN = 64
INTERMEDIATE = 128
LAYERS = 2
HEADS = 2
KV_HEADS = 2
HEAD_DIM = HIDDEN // HEADS
MAX_POSITIONS = 2048
SPECIAL_TOKENS = ["<s>", "</s>", "<pad>", "<unk>"]
BOS, EOS, PAD, UNK = SPECIAL_TOKENS

# Plain words, so that ordinary prompts ("hello world", "hi") become few tokens.
WORD_TEXT = """
the a an and or but if then so because of to in on at by for with from into over under about after before
is are was were be been being has have had do does did will would can could should may might must shall
i you he she it we they me him her us them my your his its our their this that these those there here
what which who whom whose when where why how all any each every some no not only very just also too more
most less least many much few other another such same own new old good bad big small long short high low
first last next early late great little right left young hot cold warm cool open close true false real
hello hi hey world model server token text word line file data code test user system assistant message
answer question reply request response chat prompt serve serving served node host cluster fleet network
time day night week month year today tomorrow morning evening hour minute second moment while until since
one two three four five six seven eight nine ten hundred thousand million zero half double single
man woman child people person friend family group team company city country place house room door window
water fire earth air light dark sun moon star sky sea river mountain tree forest flower grass stone road
say said tell told ask asked know knew think thought see saw look looked find found give gave take took
make made go went come came get got put run ran walk walked read wrote write speak spoke hear heard feel
work worked play played call called try tried use used want wanted need needed like liked love loved
start started stop stopped begin began end ended keep kept let help helped show showed move moved live
turn turned bring brought hold held stand stood sit sat lose lost pay paid meet met learn learned build
cat dog bird fish horse cow sheep lion bear wolf fox mouse rabbit snake frog bee ant whale shark eagle
red green blue yellow black white brown gray orange purple pink silver gold color shape size number
book paper letter story song music art picture film game sport ball car train ship plane bus bike
bread milk cheese apple orange banana rice soup tea coffee sugar salt egg meat fruit cake dinner lunch
computer machine engine memory cache kernel thread process queue batch layer weight vector matrix graph
quick quickly slow slowly happy sad easy hard simple clear quiet loud soft strong weak rich poor fast
"""
WORDS = WORD_TEXT.split()

# Syllables for made-up words: they give the BPE trainer enough distinct material to fill all 2048 entries.
ONSETS = ["b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "z", "br", "ch",
          "cl", "dr", "fl", "gr", "kr", "pl", "qu", "sh", "sl", "st", "th", "tr", "wh"]
NUCLEI = ["a", "e", "i", "o", "u", "y", "ai", "ea", "ee", "oa", "oo", "ou"]
CODAS = ["", "", "", "n", "r", "s", "t", "l", "m", "ck", "nd", "ng", "rk", "st", "x"]
PUNCTUATION = [".", ".", ".", "!", "?", ","]


def made_up_word(rng):
    return "".join(rng.choice(ONSETS) + rng.choice(NUCLEI) + rng.choice(CODAS)
                   for _syllable in range(rng.randint(1, 3)))


def corpus(rng):
    """About 40,000 lines of fixed-seed sentences mixing plain words, made-up words, numbers and chat lines."""
    made_up = sorted({made_up_word(rng) for _word in range(3000)})
    vocabulary = WORDS + made_up
    # A Zipf-like weighting, so that common words merge into single tokens first.
    cum_weights = list(itertools.accumulate(1.0 / (rank + 1) for rank in range(len(vocabulary))))
    lines = []
    for _line in range(40000):
        words = rng.choices(vocabulary, cum_weights=cum_weights, k=rng.randint(4, 16))
        if rng.random() < 0.2:
            words.insert(rng.randrange(len(words) + 1), str(rng.randint(0, 99999)))
        sentence = " ".join(words)
        sentence = sentence[0].upper() + sentence[1:] + rng.choice(PUNCTUATION)
        if rng.random() < 0.1:
            sentence = "%s: %s" % (rng.choice(["user", "assistant", "system"]), sentence)
        lines.append(sentence)
    return lines


def build_tokenizer(lines):
    tokenizer = Tokenizer(models.BPE(unk_token=None))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        min_frequency=1,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(lines, trainer=trainer)
    # Like Llama: a BOS token in front of every sequence when special tokens are added.
    tokenizer.post_processor = processors.TemplateProcessing(
        single="%s $A" % BOS,
        pair="%s $A %s $B" % (BOS, BOS),
        special_tokens=[(BOS, tokenizer.token_to_id(BOS))],
    )
    if tokenizer.get_vocab_size() != VOCAB_SIZE:
        sys.exit("the tokenizer has %d entries, not %d: the corpus is too small"
                 % (tokenizer.get_vocab_size(), VOCAB_SIZE))
    return tokenizer


# Renders messages as "role: content" lines after BOS; add_generation_prompt opens the assistant's turn.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ message['role'] }}: {{ message['content'] }}{{ eos_token }}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}"
)


def weights(rng):
    """float32 weights named as Hugging Face's LlamaForCausalLM names them."""

    def normal(*shape):
        return (rng.standard_normal(shape, dtype=np.float32) * np.float32(0.02)).astype(np.float32)

    tensors = {"model.embed_tokens.weight": normal(VOCAB_SIZE, HIDDEN)}
    for layer in range(LAYERS):
        prefix = "model.layers.%d." % layer
        tensors[prefix + "self_attn.q_proj.weight"] = normal(HEADS * HEAD_DIM, HIDDEN)
        tensors[prefix + "self_attn.k_proj.weight"] = normal(KV_HEADS * HEAD_DIM, HIDDEN)
        tensors[prefix + "self_attn.v_proj.weight"] = normal(KV_HEADS * HEAD_DIM, HIDDEN)
        tensors[prefix + "self_attn.o_proj.weight"] = normal(HIDDEN, HEADS * HEAD_DIM)
        tensors[prefix + "mlp.gate_proj.weight"] = normal(INTERMEDIATE, HIDDEN)
        tensors[prefix + "mlp.up_proj.weight"] = normal(INTERMEDIATE, HIDDEN)
        tensors[prefix + "mlp.down_proj.weight"] = normal(HIDDEN, INTERMEDIATE)
        tensors[prefix + "input_layernorm.weight"] = np.ones(HIDDEN, dtype=np.float32)
        tensors[prefix + "post_attention_layernorm.weight"] = np.ones(HIDDEN, dtype=np.float32)
    tensors["model.norm.weight"] = np.ones(HIDDEN, dtype=np.float32)
    tensors["lm_head.weight"] = normal(VOCAB_SIZE, HIDDEN)
    return tensors


def write_json(path, data):
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=2)
        handle.write("\n")


def main(argv):
    if len(argv) != 2:
        sys.exit("usage: build_tiny_model.py OUTPUT_DIR")
    out = argv[1]
    os.makedirs(out, exist_ok=True)

    tokenizer = build_tokenizer(corpus(random.Random(SEED)))
    ids = {token: tokenizer.token_to_id(token) for token in SPECIAL_TOKENS}
    tokenizer.save(os.path.join(out, "tokenizer.json"))
    write_json(os.path.join(out, "tokenizer_config.json"), {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS,
        "eos_token": EOS,
        "pad_token": PAD,
        "unk_token": UNK,
        "model_max_length": MAX_POSITIONS,
        "clean_up_tokenization_spaces": False,
        "added_tokens_decoder": {
            str(ids[token]): {"content": token, "lstrip": False, "normalized": False, "rstrip": False,
                              "single_word": False, "special": True}
            for token in SPECIAL_TOKENS
        },
        "chat_template": CHAT_TEMPLATE,
    })
    write_json(os.path.join(out, "special_tokens_map.json"),
               {"bos_token": BOS, "eos_token": EOS, "pad_token": PAD, "unk_token": UNK})
    write_json(os.path.join(out, "config.json"), {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": HEAD_DIM,
        "hidden_act": "silu",
        "vocab_size": VOCAB_SIZE,
        "max_position_embeddings": MAX_POSITIONS,
        "rms_norm_eps": 1e-05,
        "rope_theta": 10000.0,
        "attention_bias": False,
        "mlp_bias": False,
        "initializer_range": 0.02,
        "torch_dtype": "float32",
        "bos_token_id": ids[BOS],
        "eos_token_id": ids[EOS],
        "pad_token_id": ids[PAD],
        "tie_word_embeddings": False,
        "use_cache": True,
    })
    write_json(os.path.join(out, "generation_config.json"),
               {"bos_token_id": ids[BOS], "eos_token_id": ids[EOS], "pad_token_id": ids[PAD]})
    save_file(weights(np.random.default_rng(SEED)), os.path.join(out, "model.safetensors"), metadata={"format": "pt"})


if __name__ == "__main__":
    main(sys.argv)
