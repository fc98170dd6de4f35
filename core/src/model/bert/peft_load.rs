//! `[model] adapter = DIR`: a PEFT adapter directory loaded into a run's LoRA adapters
//! ([`load`]), the other direction of [`super::export`].

use super::*;

/// Why [`load`] refused an adapter directory: a message and a hint, for an error positioned at
/// `[model] adapter`.
#[derive(Clone, Debug, PartialEq)]
pub struct LoadError {
    /// What is wrong, naming the file and the key.
    pub message: String,
    /// What to do.
    pub hint: Option<String>,
}

fn refuse(message: String, hint: Option<String>) -> LoadError {
    LoadError { message, hint }
}

/// Loads the PEFT adapter directory `dir` into `model`, engram's BERT with adapters attached
/// by the `lora` memory strategy: each `lora_A`/`lora_B` (transposed back) into the layer's
/// `lora.a`/`lora.b`, each `modules_to_save` tensor into its layer, and, when the directory
/// has [`HEAD_FILE`] (engram's export), the classifier.
///
/// The adapters must be the run's: the same rank `r`, the same `α/r`, and the same layers
/// (each adapted layer has its factors in the file, and each factor in the file names an
/// adapted layer), so `targets`, `rank` and `alpha` are written in the `lora` entry rather than
/// derived from the file: the entry is what the run reports and checkpoints, and a file that
/// disagrees with it is a mistake worth a message.
///
/// # Errors
/// [`LoadError`] for a missing or unreadable file, a config that is not a plain LoRA one
/// (`peft_type`, `use_dora`, `use_rslora`, `fan_in_fan_out`, `bias`, `rank_pattern`,
/// `alpha_pattern`), a model without adapters, a rank or
/// `lora_alpha` that differs from the run's, a key that names no module of this BERT or no
/// adapted one, a shape that does not fit, and an adapted layer the file has no factors for.
pub fn load(model: Model, dir: &Path) -> std::result::Result<Model, LoadError> {
    let (c, r, alpha) = read_config(dir)?;
    let adapted = adapted(&model).map_err(|e| refuse(e.to_string(), None))?;
    check_adapted(&adapted, r, alpha, &dir.join(CONFIG_FILE))?;
    let p = parts(&model).ok_or_else(|| refuse("not a BERT model".into(), None))?;
    let mut new = factor_values(&model, &p, &adapted, r, dir, &c["target_modules"])?;
    let head_path = format!("blocks.{}.linear", p.layers.len() + 1);
    let [hidden, classes] = p.head.linear.weight.shape().dims();
    let pooling = serde_json::to_value(p.head.pooling).unwrap_or_default();
    let pooled = (&pooling, p.embeddings.pad_id as usize);
    head_values(dir, &head_path, hidden, classes, pooled, &mut new)?;
    Ok(model.update_params(&mut |info, t| {
        new.remove(&info.path).map(|v| {
            let n = v.len();
            Tensor::<1>::from_data(TensorData::new(v, [n]), &t.device()).cast(t.dtype())
        })
    }))
}

/// `adapter_config.json` of `dir`: the JSON, `r` and `lora_alpha` (see [`load`] for what is
/// refused).
fn read_config(dir: &Path) -> std::result::Result<(serde_json::Value, usize, f64), LoadError> {
    let cfg_path = dir.join(CONFIG_FILE);
    let text = crate::fsutil::read_bounded(&cfg_path, 1 << 20)
        .map_err(|e| refuse(format!("{}: {e}", cfg_path.display()), Some(format!("an adapter directory holds {CONFIG_FILE} and {ADAPTER_FILE}, as `engram export --peft` and PEFT's save_pretrained write them"))))?;
    let c: serde_json::Value = serde_json::from_slice(&text)
        .map_err(|e| refuse(format!("{}: not JSON: {e}", cfg_path.display()), None))?;
    let field = |k: &str| &c[k];
    let nonempty = |k: &str| field(k).as_object().is_some_and(|o| !o.is_empty());
    let unlike: Vec<String> = [
        ("peft_type", field("peft_type").as_str() != Some("LORA")),
        ("use_dora", field("use_dora").as_bool() == Some(true)),
        ("use_rslora", field("use_rslora").as_bool() == Some(true)),
        (
            "fan_in_fan_out",
            field("fan_in_fan_out").as_bool() == Some(true),
        ),
        ("bias", field("bias").as_str().is_some_and(|b| b != "none")),
        ("rank_pattern", nonempty("rank_pattern")),
        ("alpha_pattern", nonempty("alpha_pattern")),
    ]
    .into_iter()
    .filter(|(_, unlike)| *unlike)
    .map(|(k, _)| format!("{k} {}", field(k)))
    .collect();
    if !unlike.is_empty() {
        return Err(refuse(
            format!(
                "{}: {}: engram loads plain LoRA adapters (peft_type \"LORA\", no DoRA or \
                 rsLoRA, fan_in_fan_out false, bias \"none\", one r and lora_alpha for every \
                 layer: no rank_pattern or alpha_pattern)",
                cfg_path.display(),
                unlike.join(", ")
            ),
            None,
        ));
    }
    let (Some(r), Some(alpha)) = (field("r").as_u64(), field("lora_alpha").as_f64()) else {
        let says = |k: &str| match field(k) {
            serde_json::Value::Null => format!("no {k}"),
            v => format!("{k} {v}"),
        };
        return Err(refuse(
            format!(
                "{}: {}, {}; r must be a whole number ≥ 1 and lora_alpha a number",
                cfg_path.display(),
                says("r"),
                says("lora_alpha")
            ),
            None,
        ));
    };
    let r = r as usize;
    Ok((c, r, alpha))
}

/// Refuses a run without adapters, or whose rank or `α/r` differs from the file's `r` and
/// `lora_alpha` (`cfg_path` names the file).
fn check_adapted(
    adapted: &[Adapted],
    r: usize,
    alpha: f64,
    cfg_path: &Path,
) -> std::result::Result<(), LoadError> {
    let Some(first) = adapted.first() else {
        return Err(refuse(
            "`adapter` loads LoRA factors, and this run attaches none".into(),
            Some(format!(
                "add [[memory]] type = \"lora\" with rank = {r}, alpha = {alpha} and the \
                 adapter's target_modules as targets"
            )),
        ));
    };
    if first.rank != r {
        return Err(refuse(
            format!(
                "{} has r = {r} and the run's lora adapters rank {}",
                cfg_path.display(),
                first.rank
            ),
            Some(format!("set rank = {r} in [[memory]] type = \"lora\"")),
        ));
    }
    if (first.scale - alpha / r as f64).abs() > 1e-9 * first.scale.abs() {
        return Err(refuse(
            format!(
                "{} has lora_alpha = {alpha} and the run's lora alpha = {}",
                cfg_path.display(),
                first.scale * r as f64
            ),
            Some(format!("set alpha = {alpha} in [[memory]] type = \"lora\"")),
        ));
    }
    Ok(())
}

/// The adapter file's tensors as the values of `model`'s parameters (engram paths, engram
/// layouts): every factor of an adapted layer, and the `modules_to_save` parameters; refuses a
/// key that names nothing (adapted), a shape that does not fit, and an adapted layer without
/// both factors (`target_modules` from the config, for the hint).
fn factor_values(
    model: &Model,
    p: &Parts<'_>,
    adapted: &[Adapted],
    r: usize,
    dir: &Path,
    target_modules: &serde_json::Value,
) -> std::result::Result<HashMap<String, Vec<f32>>, LoadError> {
    let layers = p.layers.len();
    let names = param_names(layers);
    let shapes: HashMap<String, Vec<usize>> = model
        .params()
        .into_iter()
        .map(|i| (i.path, i.shape))
        .collect();
    let file = dir.join(ADAPTER_FILE);
    let tensors = read_safetensors(&file).map_err(|m| refuse(m, None))?;
    let mut new: HashMap<String, Vec<f32>> = HashMap::new();
    let targets: Vec<&str> = adapted.iter().map(|a| a.module.as_str()).collect();
    let no_module = |key: &str, why: &str| {
        refuse(
            format!("{}: key {key} {why}", file.display()),
            Some(format!(
                "the run adapts {}; give the lora entry the adapter's targets",
                targets.join(", ")
            )),
        )
    };
    for (key, (shape, v)) in &tensors {
        let Some(name) = key.strip_prefix(PREFIX) else {
            return Err(no_module(key, &format!("does not start with {PREFIX}")));
        };
        let factor = [(".lora_A.weight", "a"), (".lora_B.weight", "b")]
            .into_iter()
            .find_map(|(s, f)| name.strip_suffix(s).map(|m| (m, f)));
        let (path, want, values) = if let Some((hf, f)) = factor {
            let Some(n) = names
                .iter()
                .find(|n| n.kind == Kind::LinearWeight && module_of(&n.hf) == hf)
            else {
                return Err(no_module(key, "names no Linear module of this BERT"));
            };
            let module = module_of(&n.engram);
            let Some(a) = adapted.iter().find(|a| a.module == module) else {
                return Err(no_module(
                    key,
                    &format!("names {module}, which this run does not adapt"),
                ));
            };
            let [d_in, d_out] = a.shape;
            let (want, values) = if f == "a" {
                (vec![r, d_in], transpose(v, r, d_in))
            } else {
                (vec![d_out, r], transpose(v, d_out, r))
            };
            (
                if f == "a" { a.a.clone() } else { a.b.clone() },
                want,
                values,
            )
        } else {
            let Some(n) = names.iter().find(|n| n.hf == name) else {
                return Err(no_module(key, "names no parameter of this BERT"));
            };
            let s = shapes.get(&n.engram).cloned().unwrap_or_default();
            match (n.kind, s.as_slice()) {
                (Kind::LinearWeight, [i, o]) => {
                    (n.engram.clone(), vec![*o, *i], transpose(v, *o, *i))
                }
                _ => (n.engram.clone(), s, v.clone()),
            }
        };
        if *shape != want {
            return Err(refuse(
                format!(
                    "{}: {key} is {shape:?}, where this model needs {want:?}",
                    file.display()
                ),
                Some("the adapter was trained on another geometry or rank".into()),
            ));
        }
        new.insert(path, values);
    }
    for a in adapted {
        for (f, path) in [("a", &a.a), ("b", &a.b)] {
            if !new.contains_key(path) {
                // The file's layers in engram's names, which `targets` takes (PEFT's
                // target_modules name the same layers in Hugging Face's).
                let held: Vec<&str> = adapted
                    .iter()
                    .filter(|a| new.contains_key(&a.a))
                    .map(|a| a.module.as_str())
                    .collect();
                return Err(refuse(
                    format!(
                        "{} has no lora_{} for {}, which the run adapts",
                        file.display(),
                        f.to_uppercase(),
                        a.module
                    ),
                    Some(if held.is_empty() {
                        format!("{} holds no LoRA factors at all", file.display())
                    } else {
                        format!(
                            "set the lora entry's targets to the layers the adapter holds: \
                             targets = {held:?} (its target_modules, {target_modules}, name \
                             them in Hugging Face's terms)"
                        )
                    }),
                ));
            }
        }
    }
    Ok(new)
}

/// engram's head from `DIR/engram_head.safetensors` when present (weight `[classes, hidden]`,
/// bias `[classes]`) into `new` at `head_path`, in engram's layout; refuses a shape that does
/// not fit, and a head whose `engram_head.json` is missing or was trained on another pooling
/// or pad id than this model's `pooled` (`[model] pooling` as JSON, the pad id): the same
/// weights read from other pooled features give other logits.
fn head_values(
    dir: &Path,
    head_path: &str,
    hidden: usize,
    classes: usize,
    pooled: (&serde_json::Value, usize),
    new: &mut HashMap<String, Vec<f32>>,
) -> std::result::Result<(), LoadError> {
    let head_file = dir.join(HEAD_FILE);
    if head_file.exists() {
        check_head_config(&dir.join(HEAD_CONFIG), pooled)?;
        let head = read_safetensors(&head_file).map_err(|m| refuse(m, None))?;
        for (name, want) in [("weight", vec![classes, hidden]), ("bias", vec![classes])] {
            let Some((shape, v)) = head.get(name) else {
                continue;
            };
            if *shape != want {
                return Err(refuse(
                    format!(
                        "{}: {name} is {shape:?}, where this model's head needs {want:?}",
                        head_file.display()
                    ),
                    Some(
                        "the stream's classes or the model's width differ from the exported run's"
                            .into(),
                    ),
                ));
            }
            let values = if name == "weight" {
                transpose(v, classes, hidden)
            } else {
                v.clone()
            };
            new.insert(format!("{head_path}.{name}"), values);
        }
    }
    Ok(())
}

/// `engram_head.json` at `file` against this model's pooling and pad id (see [`head_values`]).
fn check_head_config(
    file: &Path,
    (pooling, pad_id): (&serde_json::Value, usize),
) -> std::result::Result<(), LoadError> {
    let text = std::fs::read_to_string(file).map_err(|e| {
        refuse(
            format!(
                "{}: {e}; the directory has {HEAD_FILE} without it, so the head's pooling is unknown",
                file.display()
            ),
            Some("export the adapter again with `engram export --peft DIR`, which writes both".into()),
        )
    })?;
    let c: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| refuse(format!("{}: {e}", file.display()), None))?;
    if &c["pooling"] != pooling {
        return Err(refuse(
            format!(
                "{}: the head was trained on pooling {}, where this model pools with {pooling}",
                file.display(),
                c["pooling"]
            ),
            Some(format!(
                "set [model] pooling = {} (the exported run's), or delete {HEAD_FILE} to train a new head",
                c["pooling"]
            )),
        ));
    }
    if c["pad_token_id"].as_u64() != Some(pad_id as u64) {
        return Err(refuse(
            format!(
                "{}: the head was trained with pad_token_id {}, where this model's is {pad_id}",
                file.display(),
                c["pad_token_id"]
            ),
            Some("load it over the base model the run was exported from".into()),
        ));
    }
    Ok(())
}
