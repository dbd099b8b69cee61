//! The README and `docs/` say what the code does, checked against the code:
//!
//! * the README stays a guide a learner finishes: at most [`README_MAX_LINES`] lines;
//! * each of the five steps links to the library's lines that ARE the step: the file
//!   exists, the range is inside it, and its code (not only its comments) contains the
//!   operation the step's sentence names;
//! * each step also links to where the app calls it, checked the same way: the app's
//!   lines contain the call;
//! * and each step links to the lab run that switches it off (`GET /lab?step=…`, a step
//!   the lab has);
//! * every relative link of README.md and `docs/*.md` names a file that exists (and a
//!   line range inside it);
//! * every test `docs/guarantees.md` names exists, as a test;
//! * the configuration tables of `docs/configuration.md` match the binary, in both
//!   directions: every long flag that `seatlock serve --help` (and `seatlock seed
//!   --help`) lists, apart from `--help` and `--version`, has a row, and every flag a
//!   table lists still exists.
//!
//! Needs no Redis or Postgres: it reads files and runs `--help`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The README's ceiling, in lines: one screen per idea; what a feature needs to
/// explain goes in its page under `docs/`.
const README_MAX_LINES: usize = 200;

/// One row of the README's table of the five steps.
struct Step {
    /// How the row starts: `"1."`.
    number: &'static str,
    /// What the step's sentence names and the library's lines must contain.
    operations: &'static [&'static str],
    /// What the app's lines must contain: the call that runs the step.
    app_call: &'static [&'static str],
    /// The lab run that switches the step off.
    lab: &'static str,
}

/// The five steps, in the order of the README's table.
const STEPS: [Step; 5] = [
    Step {
        number: "1.",
        operations: &["SET", "NX"],
        app_call: &["leases", "acquire_all(&grant)"],
        lab: "create-if-absent",
    },
    Step {
        number: "2.",
        operations: &["ttl / 3"],
        app_call: &["Watchdog::start("],
        lab: "lease",
    },
    Step {
        number: "3.",
        operations: &["DEL", "owner"],
        app_call: &["release_held_by(", "buyer.id()"],
        lab: "owner-check",
    },
    Step {
        number: "4.",
        operations: &["fence_token <="],
        app_call: &["queries::sell(", "token"],
        lab: "fencing",
    },
    Step {
        number: "5.",
        operations: &["ceiling"],
        app_call: &["fn raise_ceiling", "ceiling"],
        lab: "ledger",
    },
];

/// Where the README's lab links point: the `make lab` server's `GET /lab`.
const LAB: &str = "http://127.0.0.1:3000/lab?step=";

/// The repository's root.
fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|err| panic!("read {}: {err}", path.display()))
}

/// The relative links (`](target)`) of a Markdown text, without web and in-page ones.
fn relative_links(markdown: &str) -> Vec<String> {
    markdown
        .split("](")
        .skip(1)
        .filter_map(|rest| rest.split([')', ' ']).next())
        .filter(|target| !target.starts_with("http") && !target.starts_with('#'))
        .map(str::to_owned)
        .collect()
}

/// The file a link of the Markdown file `from` names, and its line range (`#L3-L9`,
/// `#L3`) if it has one.
fn resolve(from: &Path, link: &str) -> (PathBuf, Option<(usize, usize)>) {
    let (path, fragment) = link.split_once('#').unwrap_or((link, ""));
    let file = from.parent().unwrap().join(path);
    let range = fragment.strip_prefix('L').map(|lines| {
        let (first, last) = lines.split_once("-L").unwrap_or((lines, lines));
        let number = |n: &str| {
            n.parse::<usize>()
                .unwrap_or_else(|_| panic!("{link}: line {n}"))
        };
        (number(first), number(last))
    });
    (file, range)
}

/// The lines `range` (1-based, inclusive) of `file`; panics naming `link` if the file is
/// missing or the range is not inside it.
fn lines_of(file: &Path, range: (usize, usize), link: &str) -> String {
    let text = read(file);
    let lines: Vec<&str> = text.lines().collect();
    let (first, last) = range;
    assert!(
        1 <= first && first <= last && last <= lines.len(),
        "{link}: lines {first}-{last} are not inside {} ({} lines)",
        file.display(),
        lines.len()
    );
    lines[first - 1..last].join("\n")
}

#[test]
fn the_readme_is_at_most_two_hundred_lines() {
    let lines = read(&root().join("README.md")).lines().count();
    assert!(
        lines <= README_MAX_LINES,
        "README.md has {lines} lines, more than {README_MAX_LINES}: move what a feature \
         needs to explain into its page under docs/ and link it from \"Read next\""
    );
}

/// The one link of a table cell, and the code of the lines it names: its comment lines
/// left out, so a comment that names the operation is not the step.
fn linked_code(readme: &Path, step: &str, cell: &str) -> (String, String) {
    let links = relative_links(cell);
    assert_eq!(links.len(), 1, "step {step}: one link in the cell: {cell}");
    let (file, range) = resolve(readme, &links[0]);
    let range = range.unwrap_or_else(|| panic!("step {step}: {} names no lines", links[0]));
    let lines = lines_of(&file, range, &links[0]);
    let code = lines
        .lines()
        .filter(|line| {
            let line = line.trim_start();
            !line.starts_with("//") && !line.starts_with("--")
        })
        .collect::<Vec<_>>()
        .join("\n");
    (links[0].clone(), code)
}

#[test]
fn each_step_links_to_the_lines_that_do_it() {
    let readme_path = root().join("README.md");
    let readme = read(&readme_path);
    let rows: Vec<&str> = readme
        .lines()
        .filter(|line| {
            STEPS
                .iter()
                .any(|step| line.starts_with(&format!("| {} ", step.number)))
        })
        .collect();
    assert_eq!(rows.len(), STEPS.len(), "the five steps' table: {rows:#?}");
    for (row, step) in rows.iter().zip(STEPS) {
        let n = step.number;
        assert!(row.starts_with(&format!("| {n} ")), "steps in order: {row}");
        let cells: Vec<&str> = row.split('|').collect();
        let (sentence, place, app, lab) = (cells[2], cells[3], cells[4], cells[5]);
        // The last column runs the step's lab: its step exists, and is this one.
        assert!(
            lab.contains(&format!("]({LAB}{})", step.lab)),
            "step {n}: links its lab run {LAB}{}: {lab}",
            step.lab
        );
        let known = seatlock_lab::lab::Step::parse(step.lab);
        assert_eq!(
            known.map(|s| s.slug()),
            Some(step.lab),
            "step {n}: the lab has {}",
            step.lab
        );
        // The library's lines do what the sentence names.
        let (link, code) = linked_code(&readme_path, n, place);
        for operation in step.operations {
            assert!(
                sentence.contains(operation),
                "step {n}'s sentence names {operation:?}: {sentence}"
            );
            assert!(
                code.contains(operation),
                "step {n}: the code of {link} does not contain {operation:?}:\n{code}"
            );
        }
        // The app's lines make the call, in code: a link that drifts fails here.
        let (link, code) = linked_code(&readme_path, n, app);
        assert!(
            link.starts_with("src/"),
            "step {n}: the app's call is in src/: {link}"
        );
        for call in step.app_call {
            assert!(
                code.contains(call),
                "step {n}: the app's lines {link} do not contain {call:?}:\n{code}"
            );
        }
    }
}

#[test]
fn every_relative_link_of_the_readme_and_the_docs_resolves() {
    let mut pages = vec![root().join("README.md")];
    for entry in std::fs::read_dir(root().join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|ext| ext == "md") {
            pages.push(path);
        }
    }
    let mut broken = Vec::new();
    for page in &pages {
        for link in relative_links(&read(page)) {
            let (file, range) = resolve(page, &link);
            if !file.exists() {
                broken.push(format!("{}: {link}", page.display()));
            } else if let Some(range) = range {
                lines_of(&file, range, &link);
            }
        }
    }
    assert!(broken.is_empty(), "links to missing files: {broken:#?}");
}

/// Every `fn` of the workspace's Rust files that carries a test attribute (`#[test]`,
/// `#[tokio::test]`, …) on one of the three lines above it.
fn test_names() -> BTreeSet<String> {
    fn walk(dir: &Path, names: &mut BTreeSet<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy();
            if path.is_dir() {
                if !["target", "node_modules", "driver", "driver-npm"].contains(&&*name)
                    && !name.starts_with('.')
                {
                    walk(&path, names);
                }
            } else if name.ends_with(".rs") {
                let text = read(&path);
                let lines: Vec<&str> = text.lines().collect();
                for (i, line) in lines.iter().enumerate() {
                    let Some((_, rest)) = line.split_once("fn ") else {
                        continue;
                    };
                    let name: String = rest
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    if lines[i.saturating_sub(3)..i]
                        .iter()
                        .any(|l| l.contains("test]") || l.contains("test("))
                    {
                        names.insert(name);
                    }
                }
            }
        }
    }
    let mut names = BTreeSet::new();
    walk(root(), &mut names);
    names
}

#[test]
fn every_test_the_guarantees_page_names_exists() {
    let page = read(&root().join("docs/guarantees.md"));
    let named: BTreeSet<&str> = page
        .lines()
        .filter_map(|line| line.strip_prefix('|')?.split('|').nth(1))
        .flat_map(|cell| cell.split('`').skip(1).step_by(2))
        .filter(|span| {
            span.matches('_').count() >= 2
                && span
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        })
        .collect();
    assert!(named.len() > 100, "found the test names: {}", named.len());
    let tests = test_names();
    let missing: Vec<_> = named
        .iter()
        .filter(|name| !tests.contains(**name))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/guarantees.md names tests that do not exist: {missing:?}"
    );
}

/// The long flags `seatlock <subcommand> --help` lists, without `--help` and `--version`.
fn help_flags(subcommand: &str) -> BTreeSet<String> {
    let out = Command::new(env!("CARGO_BIN_EXE_seatlock"))
        .args([subcommand, "--help"])
        .output()
        .expect("run seatlock --help");
    assert!(out.status.success(), "seatlock {subcommand} --help failed");
    String::from_utf8(out.stdout)
        .expect("--help is UTF-8")
        .lines()
        .filter_map(option_flag)
        .filter(|flag| flag != "--help" && flag != "--version")
        .collect()
}

/// The long flag an option line of clap's help starts with (`  -h, --help` or
/// `      --bind <BIND>`); `None` for descriptions and possible values (`- fenced: …`).
fn option_flag(line: &str) -> Option<String> {
    let mut words = line.split_whitespace();
    let mut word = words.next()?;
    if word.len() == 3 && word.starts_with('-') && word.ends_with(',') {
        word = words.next()?;
    }
    let name = word.strip_prefix("--")?;
    let name: String = name
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
        .collect();
    (!name.is_empty()).then(|| format!("--{name}"))
}

/// The flags in the first column of the table under the `## …` heading naming
/// `` `seatlock <subcommand>` `` in `docs/configuration.md`.
fn readme_flags(subcommand: &str) -> BTreeSet<String> {
    let page = read(&root().join("docs/configuration.md"));
    let heading = format!("`seatlock {subcommand}`");
    let table = page
        .split("\n## ")
        .find(|s| s.lines().next().is_some_and(|h| h.contains(&heading)))
        .unwrap_or_else(|| panic!("no `## {heading}` table in docs/configuration.md"));
    table
        .lines()
        .filter_map(|line| line.strip_prefix('|')?.split('|').next())
        .flat_map(|cell| cell.split('`').skip(1).step_by(2))
        .filter(|code| code.starts_with("--"))
        .map(str::to_owned)
        .collect()
}

/// Both directions at once, so one failure names every missing and every stale flag.
fn assert_table_matches_help(subcommand: &str) {
    let help = help_flags(subcommand);
    assert!(
        help.contains("--database-url"),
        "found no flags in `seatlock {subcommand} --help` (did its format change?): {help:?}"
    );
    let readme = readme_flags(subcommand);
    let missing: Vec<_> = help.difference(&readme).collect();
    let stale: Vec<_> = readme.difference(&help).collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "docs/configuration.md's `seatlock {subcommand}` table is out of date.\n\
         In --help but not in the table: {missing:?}\n\
         In the table but not in --help: {stale:?}"
    );
}

#[test]
fn the_configuration_table_lists_every_serve_flag_and_no_other() {
    assert_table_matches_help("serve");
}

#[test]
fn the_seed_table_lists_every_seed_flag_and_no_other() {
    assert_table_matches_help("seed");
}
