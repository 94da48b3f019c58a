//! The alerting files under `deploy/`: the Prometheus rules pass `promtool check rules` and
//! their unit tests (`promtool test rules`), the operations guide's alerts table names the
//! same rules with the same expressions, and the Grafana dashboard reads only metrics the
//! guide lists. `promtool` comes from Debian's `prometheus` package, installed here when it
//! is missing, as a fresh machine needs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy")
}

fn guide() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/operations.md");
    std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("read {}: {error}", path.display()))
}

/// `promtool`, installed once per test run if the machine lacks it.
fn promtool() -> &'static str {
    static INSTALLED: OnceLock<Result<(), String>> = OnceLock::new();
    let installed = INSTALLED.get_or_init(|| {
        if Command::new("promtool").arg("--version").output().is_ok_and(|run| run.status.success()) {
            return Ok(());
        }
        let install = Command::new("apt-get")
            .args(["install", "-y", "--no-install-recommends", "prometheus"])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .output()
            .map_err(|error| format!("apt-get: {error}"))?;
        if install.status.success() {
            Ok(())
        } else {
            Err(String::from_utf8_lossy(&install.stderr).into_owned())
        }
    });
    if let Err(why) = installed {
        panic!("promtool is missing and Debian's prometheus package could not be installed: {why}");
    }
    "promtool"
}

/// Runs promtool in `deploy/prometheus` and fails the test with its output unless it succeeds.
fn run_promtool(args: &[&str]) -> String {
    let run = Command::new(promtool())
        .args(args)
        .current_dir(deploy().join("prometheus"))
        .output()
        .unwrap_or_else(|error| panic!("promtool {args:?}: {error}"));
    let output = format!("{}{}", String::from_utf8_lossy(&run.stdout), String::from_utf8_lossy(&run.stderr));
    assert!(run.status.success(), "promtool {args:?} failed:\n{output}");
    output
}

/// The rules file's alerts: name → (expression, for).
fn rules() -> BTreeMap<String, (String, String)> {
    let path = deploy().join("prometheus/lectern.rules.yml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("read {}: {error}", path.display()));
    let parsed: serde_yaml::Value = serde_yaml::from_str(&text).expect("the rules file is YAML");
    let mut rules = BTreeMap::new();
    for group in parsed["groups"].as_sequence().expect("groups") {
        for rule in group["rules"].as_sequence().expect("rules") {
            let name = rule["alert"].as_str().expect("every rule is an alert").to_owned();
            let expr = rule["expr"].as_str().expect("an expression").to_owned();
            let hold = rule["for"].as_str().unwrap_or("0m").to_owned();
            rules.insert(name, (expr, hold));
        }
    }
    rules
}

/// Rule: the rules file is valid for Prometheus and every rule passes its unit tests.
#[test]
fn the_alert_rules_pass_promtool_check_and_their_unit_tests() {
    let checked = run_promtool(&["check", "rules", "lectern.rules.yml"]);
    assert!(checked.contains(&format!("{} rules found", rules().len())), "{checked}");
    run_promtool(&["test", "rules", "lectern.rules.test.yml"]);
}

/// Rule: every row of the guide's alerts table names a rule of the file, with the same
/// expression and `for`, and every rule of the file is in the guide.
#[test]
fn the_guides_alerts_and_the_rules_file_name_the_same_rules_with_the_same_expressions() {
    let guide = guide();
    let rules = rules();
    let mut in_guide = Vec::new();
    let mut disagreements = Vec::new();
    for row in guide.lines().filter(|line| line.starts_with("| ") && line.contains("(`Lectern")) {
        let columns: Vec<&str> = row.split(" | ").collect();
        let name = columns[0].split("(`").nth(1).and_then(|rest| rest.split('`').next()).unwrap_or_default();
        in_guide.push(name.to_owned());
        let Some((expr, hold)) = rules.get(name) else {
            disagreements.push(format!("{name}: in the guide, not in the rules file"));
            continue;
        };
        let guide_expr = columns.get(1).map(|column| column.trim_matches('`')).unwrap_or_default();
        if guide_expr != expr {
            disagreements.push(format!("{name}: the guide says `{guide_expr}`, the file `{expr}`"));
        }
        if columns.get(2).copied() != Some(hold.as_str()) {
            disagreements.push(format!("{name}: the guide holds it {:?}, the file {hold}", columns.get(2)));
        }
    }
    for name in rules.keys() {
        if !in_guide.contains(name) && !guide.contains(&format!("(`{name}`")) && !guide.contains(&format!("`{name}`")) {
            disagreements.push(format!("{name}: in the rules file, not in the guide"));
        }
    }
    assert!(disagreements.is_empty(), "the guide and the rules file disagree:\n{}", disagreements.join("\n"));
}

/// Rule: the dashboard reads only metrics the guide's metrics table lists (a renamed metric
/// would leave a panel empty without a word).
#[test]
fn every_metric_the_dashboard_reads_is_one_the_guide_lists() {
    let path = deploy().join("grafana/lectern.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("read {}: {error}", path.display()));
    let dashboard: serde_json::Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    let guide = guide();
    let mut unknown = Vec::new();
    let mut read = 0;
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().unwrap_or_default();
            for metric in metric_names(expr) {
                read += 1;
                // A histogram's series are listed by the histogram's name.
                let base = ["_bucket", "_sum", "_count"].iter().find_map(|suffix| metric.strip_suffix(suffix));
                let listed =
                    [Some(metric), base].into_iter().flatten().any(|name| guide.contains(&format!("| `{name}` |")));
                if !listed {
                    unknown.push(format!("{}: {metric}", panel["title"]));
                }
            }
        }
    }
    assert!(read > 20, "the dashboard reads almost nothing ({read} metrics)");
    assert!(unknown.is_empty(), "the dashboard reads metrics the guide does not list: {unknown:?}");
}

/// The `lectern_…` names an expression reads.
fn metric_names(expr: &str) -> Vec<&str> {
    let mut names = Vec::new();
    let mut rest = expr;
    while let Some(start) = rest.find("lectern_") {
        let tail = &rest[start..];
        let end = tail.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(tail.len());
        names.push(&tail[..end]);
        rest = &tail[end..];
    }
    names
}
