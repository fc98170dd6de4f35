//! The tokenizer a GGUF file's metadata describes, rebuilt as a Hugging Face `tokenizers`
//! tokenizer with the same ids as `transformers`' `AutoTokenizer.from_pretrained(dir,
//! gguf_file=…)` (its converter: `transformers/integrations/gguf/gguf_tokenizer_mapping.py`,
//! checked against transformers 5.25.0 by `bench/reference/gguf_ref.py`).
//!
//! Only `tokenizer.ggml.model = "gpt2"` (byte-level BPE) is read, as transformers builds it:
//! - the model: BPE over `tokenizer.ggml.tokens` (id = position) and `tokenizer.ggml.merges`
//!   (`"a b"` pairs, best first), no unknown token, no dropout; a token with a character
//!   outside GPT-2's byte alphabet is respelled as the byte-level spelling of its UTF-8 bytes;
//! - the pre-tokenizer: GPT-2's byte-level split (`ByteLevel`, no prefix space), or for a
//!   `tokenizer.ggml.pre` transformers knows (`llama-bpe`, `qwen2`, `gpt-4o`, `tekken`, …)
//!   that model's split regex followed by byte-level mapping (SmolLM2's `smollm` is not one
//!   of them: it uses GPT-2's split, whose digits SmolLM2's vocabulary holds singly anyway);
//! - the decoder: byte-level;
//! - special tokens: every token of type 3 (control, `<|im_start|>`) whose spelling is in the
//!   byte alphabet is a special added token (kept whole, not normalised); every token of type 4
//!   (user-defined) a plain added token;
//! - the post-processor: the `bos` token before each text when `tokenizer.ggml.add_bos_token`
//!   is true, the `eos` token after it when `tokenizer.ggml.add_eos_token` is (both false for
//!   SmolLM2: its texts get no special tokens).

use super::{GgufFile, Value, ValueType, bad};
use crate::error::Result;
use std::collections::HashMap;
use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::{BPE, Vocab};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::processors::template::TemplateProcessing;
use tokenizers::{AddedToken, SplitDelimiterBehavior, Tokenizer};

/// The token type of a control token (llama.cpp's `LLAMA_TOKEN_TYPE_CONTROL`).
const CONTROL: i64 = 3;
/// The token type of a user-defined token (`LLAMA_TOKEN_TYPE_USER_DEFINED`).
const USER_DEFINED: i64 = 4;

const LLAMA3_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const TEKKEN_SPLIT: &str = r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const GPT4O_SPLIT: &str = r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN2_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN35_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// transformers' `GGUF_PRE_TOKENIZER_SPLITS`: `tokenizer.ggml.pre` to its split regex.
const PRE_SPLITS: &[(&str, &str)] = &[
    ("llama3", LLAMA3_SPLIT),
    ("llama-v3", LLAMA3_SPLIT),
    ("llama-bpe", LLAMA3_SPLIT),
    ("falcon3", LLAMA3_SPLIT),
    ("falcon-h1", LLAMA3_SPLIT),
    ("pixtral", LLAMA3_SPLIT),
    ("midm-2.0", LLAMA3_SPLIT),
    ("lfm2", LLAMA3_SPLIT),
    ("jina-v5-nano", LLAMA3_SPLIT),
    ("dbrx", LLAMA3_SPLIT),
    ("smaug-bpe", LLAMA3_SPLIT),
    ("tekken", TEKKEN_SPLIT),
    ("qwen2", QWEN2_SPLIT),
    ("deepseek-r1-qwen", QWEN2_SPLIT),
    ("kormo", QWEN2_SPLIT),
    ("f2llmv2", QWEN2_SPLIT),
    ("megrez", QWEN2_SPLIT),
    ("qwen35", QWEN35_SPLIT),
    ("gpt-4o", GPT4O_SPLIT),
    ("llama4", GPT4O_SPLIT),
    ("kanana2", GPT4O_SPLIT),
    ("talkie", GPT4O_SPLIT),
    ("minimax-m2", GPT4O_SPLIT),
];

/// A GGUF file's tokenizer and its special token ids.
#[derive(Clone, Debug)]
pub struct GgufTokenizer {
    /// The tokenizer: `encode(text, true)` gives the ids `transformers` gives (with the
    /// `bos`/`eos` the file asks for), `decode` the text back.
    pub tokenizer: Tokenizer,
    /// `tokenizer.ggml.bos_token_id` (SmolLM2: 1, `<|im_start|>`).
    pub bos_id: Option<u32>,
    /// `tokenizer.ggml.eos_token_id` (SmolLM2: 2, `<|im_end|>`).
    pub eos_id: Option<u32>,
    /// `tokenizer.ggml.padding_token_id`.
    pub pad_id: Option<u32>,
    /// `tokenizer.ggml.unknown_token_id`.
    pub unk_id: Option<u32>,
    /// `tokenizer.ggml.add_bos_token` (false when absent).
    pub add_bos: bool,
    /// `tokenizer.ggml.add_eos_token` (false when absent).
    pub add_eos: bool,
    /// `tokenizer.ggml.pre`, the pre-tokenizer's name (SmolLM2: `smollm`).
    pub pre: Option<String>,
    /// The number of tokens (`tokenizer.ggml.tokens`).
    pub vocab_size: usize,
    /// `tokenizer.chat_template`, a Jinja template.
    pub chat_template: Option<String>,
}

/// GPT-2's byte-to-character map (`bytes_to_unicode`): the printable bytes stand for
/// themselves, the others for the characters from U+0100 up, in byte order.
fn bytes_to_unicode() -> [char; 256] {
    let mut map = ['\0'; 256];
    let mut next = 256u32;
    for (b, c) in map.iter_mut().enumerate() {
        let printable = (0x21..=0x7E).contains(&b) || (0xA1..=0xAC).contains(&b) || b >= 0xAE;
        let code = if printable {
            b as u32
        } else {
            next += 1;
            next - 1
        };
        *c = char::from_u32(code).unwrap_or('\u{FFFD}');
    }
    map
}

impl GgufFile {
    /// The tokenizer the metadata describes (see the module `tokenizer`'s documentation for
    /// how it is rebuilt).
    ///
    /// # Errors
    /// [`crate::Error::DataFile`] naming the file when `tokenizer.ggml.model` is absent or not
    /// `gpt2`, when the tokens or merges are missing or not string arrays, when a merge is not
    /// two tokens of the vocabulary separated by one space, or when a special id is out of
    /// range.
    pub fn tokenizer(&self) -> Result<GgufTokenizer> {
        let model = self.require_str("tokenizer.ggml.model")?;
        if model != "gpt2" {
            return Err(bad(
                &self.path,
                format!(
                    "tokenizer.ggml.model `{model}`: engram rebuilds only `gpt2` (byte-level BPE) tokenizers"
                ),
            ));
        }
        let tokens = self.strings("tokenizer.ggml.tokens")?;
        let merges = self.strings("tokenizer.ggml.merges")?;
        let types: Vec<i64> = match self.metadata("tokenizer.ggml.token_type") {
            None => Vec::new(),
            Some(Value::Array(_, v)) => v.iter().map(|t| t.as_i64().unwrap_or(1)).collect(),
            Some(v) => {
                return Err(bad(
                    &self.path,
                    format!(
                        "tokenizer.ggml.token_type is {}, not an array",
                        super::short(v)
                    ),
                ));
            }
        };
        let spelling = bytes_to_unicode();
        let alphabet: std::collections::HashSet<char> = spelling.iter().copied().collect();
        let spelled = |t: &str| t.chars().all(|c| alphabet.contains(&c));
        let vocab: Vocab = tokens
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let key = if spelled(t) {
                    (*t).to_string()
                } else {
                    t.bytes().map(|b| spelling[b as usize]).collect()
                };
                (key, i as u32)
            })
            .collect();
        let merges = merges
            .iter()
            .enumerate()
            .map(|(i, m)| match m.split(' ').collect::<Vec<_>>()[..] {
                [a, b] => Ok((a.to_string(), b.to_string())),
                _ => Err(bad(
                    &self.path,
                    format!(
                        "tokenizer.ggml.merges[{i}] is `{m}`: not two tokens separated by one space"
                    ),
                )),
            })
            .collect::<Result<Vec<_>>>()?;
        // The empty prefix and suffix change nothing; they are set as transformers sets them,
        // so that both serialise to the same `tokenizer.json`.
        let bpe = BPE::builder()
            .vocab_and_merges(vocab, merges)
            .continuing_subword_prefix(String::new())
            .end_of_word_suffix(String::new())
            .build()
            .map_err(|e| bad(&self.path, format!("tokenizer: {e}")))?;
        let mut tokenizer = Tokenizer::new(bpe);
        let pre = self
            .metadata("tokenizer.ggml.pre")
            .and_then(Value::as_str)
            .map(str::to_string);
        tokenizer.with_pre_tokenizer(Some(self.pre_tokenizer(pre.as_deref())?));
        tokenizer.with_decoder(Some(ByteLevelDecoder::default()));
        let control: Vec<AddedToken> = tokens
            .iter()
            .zip(&types)
            .filter(|(t, ty)| **ty == CONTROL && spelled(t))
            .map(|(t, _)| AddedToken::from((*t).to_string(), true).normalized(false))
            .collect();
        tokenizer.add_special_tokens(&control);
        let user: Vec<AddedToken> = tokens
            .iter()
            .zip(&types)
            .filter(|(t, ty)| **ty == USER_DEFINED && tokenizer.token_to_id(t).is_some())
            .map(|(t, _)| AddedToken::from((*t).to_string(), false).normalized(false))
            .collect();
        tokenizer.add_tokens(&user);
        let id = |key: &str| -> Result<Option<u32>> {
            match self.metadata(key).map(|v| v.as_u64()) {
                None => Ok(None),
                Some(Some(i)) if (i as usize) < tokens.len() => Ok(Some(i as u32)),
                Some(_) => Err(bad(
                    &self.path,
                    format!("{key} is not a token id below the {} tokens", tokens.len()),
                )),
            }
        };
        let flag = |key: &str| self.metadata(key).and_then(Value::as_bool).unwrap_or(false);
        let (bos_id, eos_id) = (
            id("tokenizer.ggml.bos_token_id")?,
            id("tokenizer.ggml.eos_token_id")?,
        );
        let bos = bos_id.filter(|_| flag("tokenizer.ggml.add_bos_token"));
        let eos = eos_id.filter(|_| flag("tokenizer.ggml.add_eos_token"));
        let post = self.post_processor(
            bos.map(|i| (tokens[i as usize], i)),
            eos.map(|i| (tokens[i as usize], i)),
        )?;
        tokenizer.with_post_processor(Some(post));
        Ok(GgufTokenizer {
            tokenizer,
            bos_id,
            eos_id,
            pad_id: id("tokenizer.ggml.padding_token_id")?,
            unk_id: id("tokenizer.ggml.unknown_token_id")?,
            add_bos: bos.is_some(),
            add_eos: eos.is_some(),
            pre,
            vocab_size: tokens.len(),
            chat_template: self
                .metadata("tokenizer.chat_template")
                .and_then(Value::as_str)
                .map(str::to_string),
        })
    }

    /// The elements of string array `key`.
    fn strings(&self, key: &str) -> Result<Vec<&str>> {
        match self.metadata(key) {
            Some(Value::Array(ValueType::String, v)) => {
                Ok(v.iter().filter_map(Value::as_str).collect())
            }
            Some(v) => Err(bad(
                &self.path,
                format!("{key} is {}, not an array of strings", super::short(v)),
            )),
            None => Err(bad(&self.path, format!("no metadata `{key}`"))),
        }
    }

    fn pre_tokenizer(&self, pre: Option<&str>) -> Result<PreTokenizerWrapper> {
        let split = pre.and_then(|p| PRE_SPLITS.iter().find(|(name, _)| *name == p));
        Ok(match split {
            None => ByteLevel::new(false, true, true).into(),
            Some((name, regex)) => {
                let split = Split::new(
                    SplitPattern::Regex((*regex).to_string()),
                    SplitDelimiterBehavior::Isolated,
                    false,
                )
                .map_err(|e| bad(&self.path, format!("pre-tokenizer `{name}`: {e}")))?;
                Sequence::new(vec![
                    split.into(),
                    ByteLevel::new(false, true, false).into(),
                ])
                .into()
            }
        })
    }

    /// transformers' `update_post_processor`: `[bos] $A [eos]` for one text, `[bos] $A [eos]
    /// [bos] $B [eos]` for a pair (type ids 0 and 1).
    fn post_processor(
        &self,
        bos: Option<(&str, u32)>,
        eos: Option<(&str, u32)>,
    ) -> Result<TemplateProcessing> {
        let piece = |t: Option<(&str, u32)>, type_id: u32| t.map(|(s, _)| format!("{s}:{type_id}"));
        let seq = |s: &str| Some(s.to_string());
        let single: Vec<String> = [piece(bos, 0), seq("$A:0"), piece(eos, 0)]
            .into_iter()
            .flatten()
            .collect();
        let pair: Vec<String> = single
            .iter()
            .cloned()
            .chain(
                [piece(bos, 1), seq("$B:1"), piece(eos, 1)]
                    .into_iter()
                    .flatten(),
            )
            .collect();
        let specials: HashMap<String, u32> = bos
            .into_iter()
            .chain(eos)
            .map(|(s, i)| (s.to_string(), i))
            .collect();
        let fail = |e: String| bad(&self.path, format!("tokenizer post-processor: {e}"));
        TemplateProcessing::builder()
            .try_single(single)
            .map_err(fail)?
            .try_pair(pair)
            .map_err(fail)?
            .special_tokens(specials.into_iter().collect::<Vec<_>>())
            .build()
            .map_err(|e| fail(e.to_string()))
    }
}
