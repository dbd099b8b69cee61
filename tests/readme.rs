//! The README's configuration tables match the binary, in both directions: every long
//! flag that `seatlock serve --help` (and `seatlock seed --help`) lists, apart from
//! `--help` and `--version`, has a row in the matching table of README.md's
//! "Configuration" section, and every flag a table lists still exists. Needs no Redis or
//! Postgres: it only runs `--help`.

use std::collections::BTreeSet;
use std::process::Command;

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

/// The flags in the first column of the table under the `### …` heading naming
/// `` `seatlock <subcommand>` `` inside README.md's `## Configuration` section.
fn readme_flags(subcommand: &str) -> BTreeSet<String> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/README.md");
    let readme = std::fs::read_to_string(path).expect("read README.md");
    let section = readme
        .split("\n## ")
        .find(|s| s.starts_with("Configuration"))
        .expect("README.md has a `## Configuration` section");
    let heading = format!("`seatlock {subcommand}`");
    let table = section
        .split("\n### ")
        .find(|s| s.lines().next().is_some_and(|h| h.contains(&heading)))
        .unwrap_or_else(|| panic!("no `### {heading}` table under ## Configuration"));
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
        "README.md's `seatlock {subcommand}` configuration table is out of date.\n\
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
