//! The README's command synopsis (the `sh` block under "## Running") is checked against the
//! binary's own `--help`, so that the two cannot drift: every subcommand `--help` lists has a
//! line, every flag a line gives exists on its command, and the `--device` alternatives are the
//! binary's device list.

use crate::util::run;

/// The synopsis lines (`engram …`, comments removed) of README.md.
fn synopsis() -> Vec<String> {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let running = readme
        .split_once("\n## Running\n")
        .expect("README.md has a ## Running section")
        .1;
    let block = running
        .split_once("```sh\n")
        .expect("## Running opens with a sh block")
        .1
        .split_once("```")
        .unwrap()
        .0;
    block
        .lines()
        .map(|l| l.split(" #").next().unwrap().trim().to_string())
        .filter(|l| l.starts_with("engram "))
        .collect()
}

/// The subcommands `engram <path> --help` lists (without `help`).
fn subcommands(path: &[&str]) -> Vec<String> {
    let mut args = path.to_vec();
    args.push("--help");
    let (code, help) = run(&args);
    assert_eq!(code, 0, "{help}");
    let Some((_, list)) = help.split_once("Commands:\n") else {
        return Vec::new();
    };
    list.lines()
        .take_while(|l| !l.trim().is_empty())
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_string)
        .collect()
}

/// The flags (`--name`) in a synopsis line.
fn flags(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let b = line.as_bytes();
    let mut i = 0;
    while let Some(p) = line[i..].find("--") {
        let start = i + p + 2;
        let end = start
            + line[start..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
                .unwrap_or(line.len() - start);
        if end > start && b[start].is_ascii_lowercase() {
            out.push(format!("--{}", &line[start..end]));
        }
        i = end.max(start);
    }
    out
}

#[test]
fn the_readme_synopsis_matches_help() {
    let lines = synopsis();
    assert!(lines.len() > 10, "{lines:?}");
    let words =
        |l: &str| -> Vec<String> { l.split_whitespace().skip(1).map(str::to_string).collect() };
    for top in subcommands(&[]) {
        let nested = subcommands(&[top.as_str()]);
        let paths: Vec<Vec<String>> = if nested.is_empty() {
            vec![vec![top.clone()]]
        } else {
            nested
                .iter()
                .map(|n| vec![top.clone(), n.clone()])
                .collect()
        };
        for path in paths {
            let mine: Vec<&String> = lines
                .iter()
                .filter(|l| words(l).starts_with(&path))
                .collect();
            assert!(
                !mine.is_empty(),
                "`engram {}` is missing from README.md's synopsis",
                path.join(" ")
            );
            let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
            args.push("--help");
            let (code, help) = run(&args);
            assert_eq!(code, 0, "{help}");
            for line in mine {
                for flag in flags(line) {
                    let listed = help.match_indices(&flag).any(|(i, _)| {
                        !help[i + flag.len()..]
                            .starts_with(|c: char| c.is_ascii_alphanumeric() || c == '-')
                    });
                    assert!(
                        listed,
                        "README: `{line}`: `engram {}` has no {flag}",
                        path.join(" ")
                    );
                }
            }
        }
    }
    // Every line names a real command.
    let top = subcommands(&[]);
    for line in &lines {
        let w = words(line);
        assert!(top.contains(&w[0]), "README: `{line}`: no command {}", w[0]);
    }
}

#[test]
fn the_readme_device_list_is_the_binarys() {
    let mut listed: Vec<String> = synopsis()
        .iter()
        .filter_map(|l| {
            l.split_once("--device ")?
                .1
                .split(']')
                .next()
                .map(str::to_string)
        })
        .filter(|alts| alts.contains('|'))
        .flat_map(|alts| alts.split('|').map(str::to_string).collect::<Vec<_>>())
        .collect();
    listed.sort();
    let mut names: Vec<String> = engram::core::device::DEVICE_NAMES
        .iter()
        .map(|s| s.to_string())
        .collect();
    names.sort();
    assert_eq!(listed, names);
    let d = engram::core::device::DEVICE_NAMES;
    let expected = format!("{} or {}", d[..d.len() - 1].join(", "), d[d.len() - 1]);
    // And every command's --device help lists them all, from the same list.
    for cmd in [
        &["run"][..],
        &["eval"],
        &["export"],
        &["resume"],
        &["bench", "memory"],
        &["bench", "throughput"],
    ] {
        let mut args = cmd.to_vec();
        args.push("--help");
        let (_, help) = run(&args);
        let text = help.split_once("--device").unwrap().1;
        let text = text
            .split("\n  -")
            .next()
            .unwrap()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        assert!(text.contains(&expected), "{cmd:?}: {text}");
    }
}
