//! The monitoring shipped in `deploy/`: the Prometheus alert rules pass
//! `promtool check rules` and their unit tests (`promtool test rules`), the
//! Grafana dashboard is JSON whose every query parses in promtool, and both
//! name only metrics the gateway exports.
//!
//! promtool comes from `$PROMTOOL` or the `PATH` (Debian's `prometheus`
//! package). Without it the promtool tests skip as `testkit::skip` says (CI
//! fails instead). The metric-name test needs no promtool.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use gateway::telemetry::metrics::{AVAILABILITY_BOUNDS, Metrics};

/// Metric names the rules and the dashboard may use before the gateway
/// exports them: they are being added on another branch (issue 21 point 4).
/// At merge, whatever `/metrics` then exports leaves this list; the test
/// fails for an entry the gateway already exports, so the list cannot rot.
const PENDING_NAMES: &[&str] = &[];

/// Bounds of `shuffle_tenants_availability_at_most` the rules may use
/// before [`AVAILABILITY_BOUNDS`] has them (the fully-down bucket), under
/// the same rule as [`PENDING_NAMES`].
const PENDING_BOUNDS: &[&str] = &[];

fn deploy(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy")
        .join(relative)
}

fn read(relative: &str) -> String {
    let path = deploy(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// promtool, or `None` after reporting the skip. Panics when it is
/// required and missing.
fn promtool_or_skip() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("PROMTOOL").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(path));
    }
    let found = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join("promtool"))
            .find(|candidate| candidate.is_file())
    });
    if found.is_none() {
        testkit::skip::missing(
            "promtool",
            "apt-get install prometheus, or set PROMTOOL to a promtool binary",
        );
    }
    found
}

/// Runs promtool with `args` in `dir`; panics with its output unless it
/// succeeds.
fn promtool(promtool: &Path, dir: &Path, args: &[&str]) -> String {
    let output = Command::new(promtool)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("could not run {}: {e}", promtool.display()));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "promtool {} failed:\n{text}",
        args.join(" ")
    );
    text
}

/// The metric name(s) a family of `kind` named `name` is sampled as: a
/// counter as `_total`, an info metric as `_info`, a histogram as
/// `_bucket`, `_sum` and `_count`.
fn sampled_as(name: &str, kind: &str) -> Vec<String> {
    match kind {
        "counter" => vec![format!("{name}_total")],
        "info" => vec![format!("{name}_info")],
        "histogram" => ["_bucket", "_sum", "_count"]
            .iter()
            .map(|suffix| format!("{name}{suffix}"))
            .collect(),
        _ => vec![name.to_owned()],
    }
}

/// The string literal at the start of `text` (after blanks), and the rest.
fn literal(text: &str) -> Option<(&str, &str)> {
    let text = text.trim_start().strip_prefix('"')?;
    let mut escaped = false;
    for (at, c) in text.char_indices() {
        match c {
            '\\' if !escaped => escaped = true,
            '"' if !escaped => return Some((&text[..at], &text[at + 1..])),
            _ => escaped = false,
        }
    }
    None
}

/// The identifier `text` starts with (empty if none).
fn identifier(text: &str) -> &str {
    let end = text
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(text.len());
    &text[..end]
}

/// `text` without its string literals (a help text may say anything).
fn without_literals(mut text: &str) -> String {
    let mut kept = String::new();
    while let Some(at) = text.find('"') {
        kept.push_str(&text[..at]);
        match literal(&text[at..]) {
            Some((_, rest)) => text = rest,
            None => return kept,
        }
    }
    kept.push_str(text);
    kept
}

/// Every family the gateway registers, read from `src/telemetry/`'s
/// source: prometheus-client lists a family in `/metrics` only once it has
/// a series, so a counter that has not fired yet is missing from a scrape.
/// A registration names its family with a literal and its help next:
/// `families.add("name", "help")` (or `self.add`), `families.add_metric(
/// "name", "help", metric)`, `registry.register("name", "help",
/// variable.clone())`. Its kind is read, string literals left out, from
/// what types it: the `let` that binds it (`let name: Family<…, Counter>
/// = …`), the metric made right there, the `let variable = …;` that made
/// the variable registered, or the `Metrics` field the binding fills.
fn registered_names() -> BTreeSet<String> {
    let telemetry = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/telemetry");
    let read = |file: &str| std::fs::read_to_string(telemetry.join(file)).unwrap();
    let (metrics, websocket) = (read("metrics.rs"), read("websocket.rs"));
    // `Metrics`' field `name`, as declared.
    let field = |name: &str| {
        let declares = format!("{name}: ");
        metrics
            .lines()
            .map(str::trim)
            .find(|line| {
                !name.is_empty()
                    && line.ends_with(',')
                    && line
                        .strip_prefix("pub(crate) ")
                        .unwrap_or(line)
                        .starts_with(&declares)
            })
            .unwrap_or("")
    };
    let mut names = BTreeSet::new();
    for source in [metrics.as_str(), websocket.as_str()] {
        // The `let variable = …;` in `source` that made `variable`.
        let made_by = |variable: &str| {
            let binding = format!("let {variable} = ");
            source
                .find(&binding)
                .map_or("", |at| &source[at..at + source[at..].find(';').unwrap()])
        };
        for call in [".add(", ".add_metric(", ".register("] {
            for (at, _) in source.match_indices(call) {
                // `add` and `add_metric` pass their own parameters on,
                // naming no family.
                let Some((name, rest)) = literal(&source[at + call.len()..]) else {
                    continue;
                };
                let (_help, rest) =
                    literal(rest.trim_start().trim_start_matches(',')).expect("a help literal");
                let argument = rest.trim_start().trim_start_matches(',').trim_start();
                let argument = &argument[..argument.find(");").unwrap_or(argument.len())];
                let statement = source[..at]
                    .rfind("let ")
                    .map_or("", |let_at| &source[let_at..at]);
                let bound = identifier(statement.trim_start_matches("let "));
                let made = without_literals(
                    &[
                        statement,
                        argument,
                        made_by(identifier(argument)),
                        field(bound),
                    ]
                    .concat(),
                );
                let kind = if made.contains("Histogram") {
                    "histogram"
                } else if made.contains("Counter") {
                    "counter"
                } else if made.contains("Info") {
                    "info"
                } else {
                    "gauge"
                };
                names.extend(sampled_as(&format!("shuffle_{name}"), kind));
            }
        }
    }
    names
}

/// The metric names the gateway exports: every family registered, checked
/// against those its registry lists when encoded (`# TYPE` lines), so the
/// source reading above cannot quietly miss or mistype one.
fn exported_names() -> BTreeSet<String> {
    let registered = registered_names();
    let text = Metrics::new().encode();
    let mut listed = BTreeSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("a # TYPE line has a type");
            listed.extend(sampled_as(name, kind));
        }
    }
    let missed: Vec<&String> = listed.difference(&registered).collect();
    assert!(missed.is_empty(), "registered_names() missed {missed:?}");
    assert!(
        registered.contains("shuffle_requests_total")
            && registered.contains("shuffle_ejections_total")
            && registered.contains("shuffle_request_duration_seconds_bucket")
            && registered.contains("shuffle_shard_utilization_cv"),
        "{registered:?}"
    );
    registered
}

/// Every `shuffle_…` identifier in `text`.
fn used_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("shuffle_") {
        let before = rest[..at].chars().next_back();
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        // Not the middle of another word (`deploy/shuffle_x`, a uid).
        if !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
            names.insert(tail[..end].to_owned());
        }
        rest = &tail[end..];
    }
    names
}

/// The `expr` of every rule in the rules file (the one key promtool
/// evaluates), joined.
fn rule_exprs(rules: &str) -> String {
    // Each expr is either one line after `expr:` or a `|` block indented
    // deeper than the key.
    let mut out = String::new();
    let mut lines = rules.lines().peekable();
    while let Some(line) = lines.next() {
        let Some(at) = line.find("expr:") else {
            continue;
        };
        let value = line[at + 5..].trim();
        if value == "|" {
            while let Some(next) = lines.peek() {
                let indent = next.len() - next.trim_start().len();
                if !next.trim().is_empty() && indent <= at {
                    break;
                }
                out.push_str(next.trim());
                out.push('\n');
                lines.next();
            }
        } else {
            out.push_str(value);
            out.push('\n');
        }
    }
    out
}

/// Every query of the dashboard: each panel's targets and each templating
/// variable's query.
fn dashboard_queries(dashboard: &serde_json::Value) -> Vec<String> {
    let mut queries = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().into_iter().flatten() {
            queries.push(
                target["expr"]
                    .as_str()
                    .expect("a target has an expr")
                    .to_owned(),
            );
        }
    }
    for variable in dashboard["templating"]["list"]
        .as_array()
        .expect("templating")
    {
        if let Some(query) = variable["query"]["query"].as_str() {
            queries.push(query.to_owned());
        }
    }
    queries
}

fn dashboard() -> serde_json::Value {
    serde_json::from_str(&read("grafana/shuffle-shard.json"))
        .unwrap_or_else(|e| panic!("deploy/grafana/shuffle-shard.json is not JSON: {e}"))
}

/// The names in `used` the gateway does not export, and the pending names
/// it already does (which should leave [`PENDING_NAMES`]).
fn unknown_names(used: &BTreeSet<String>, exported: &BTreeSet<String>) -> Vec<String> {
    used.iter()
        .filter(|name| !exported.contains(*name) && !PENDING_NAMES.contains(&name.as_str()))
        .cloned()
        .collect()
}

#[test]
fn rules_and_dashboard_name_only_metrics_the_gateway_exports() {
    let exported = exported_names();
    let already: Vec<&&str> = PENDING_NAMES
        .iter()
        .filter(|name| exported.contains(**name))
        .collect();
    assert!(
        already.is_empty(),
        "{already:?} are exported now: take them out of PENDING_NAMES"
    );

    let rules = read("prometheus/alerts.yml");
    let rule_names = used_names(&rule_exprs(&rules));
    assert!(
        rule_names.contains("shuffle_shard_utilization_cv"),
        "{rule_names:?}"
    );
    assert_eq!(unknown_names(&rule_names, &exported), Vec::<String>::new());

    let dashboard = dashboard();
    let queries = dashboard_queries(&dashboard).join("\n");
    let dashboard_names = used_names(&queries);
    assert_eq!(
        unknown_names(&dashboard_names, &exported),
        Vec::<String>::new()
    );
    // The check is not vacuous: a made-up name is caught.
    let bogus: BTreeSet<String> = used_names("rate(shuffle_requests_totl[5m])");
    assert_eq!(unknown_names(&bogus, &exported), ["shuffle_requests_totl"]);

    // The distribution's bounds, as the gateway writes them (`le="0.9"`).
    let bounds: Vec<String> = AVAILABILITY_BOUNDS.iter().map(f64::to_string).collect();
    let already: Vec<&&str> = PENDING_BOUNDS
        .iter()
        .filter(|bound| bounds.iter().any(|b| b == *bound))
        .collect();
    assert!(
        already.is_empty(),
        "{already:?} are exported bounds now: take them out of PENDING_BOUNDS"
    );
    for text in [rule_exprs(&rules), queries] {
        for (at, _) in text.match_indices("shuffle_tenants_availability_at_most{") {
            let selector = &text[at..at + text[at..].find('}').expect("a closed selector")];
            if let Some(le) = selector.split("le=\"").nth(1) {
                let le = &le[..le.find('"').expect("a quoted bound")];
                assert!(
                    bounds.iter().any(|b| b == le) || PENDING_BOUNDS.contains(&le),
                    "le=\"{le}\" is not a bound of the availability distribution ({bounds:?})"
                );
            }
        }
    }
}

#[test]
fn the_dashboard_has_a_panel_for_each_thing_an_operator_watches() {
    let dashboard = dashboard();
    assert_eq!(dashboard["uid"], "shuffle-shard-gateway");
    let panels = dashboard["panels"].as_array().unwrap();
    let queries_of = |panel: &serde_json::Value| {
        panel["targets"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|t| t["expr"].as_str().unwrap().to_owned())
            .collect::<Vec<_>>()
            .join(" ")
    };
    for metric in [
        "shuffle_shard_healthy",
        "shuffle_attempts_total",
        "shuffle_tenants_availability_at_most",
        "shuffle_blast_fully_down_tenants",
        "shuffle_failovers_total",
        "shuffle_retry_budget_exhausted_total",
        "shuffle_shard_utilization_cv",
        "shuffle_ejections_total",
    ] {
        assert!(
            panels.iter().any(|p| queries_of(p).contains(metric)),
            "no panel shows {metric}"
        );
    }
    // Panels do not overlap: Grafana would stack them unpredictably.
    let mut cells = BTreeSet::new();
    for panel in panels {
        let grid = &panel["gridPos"];
        let (x, y, w, h) = (
            grid["x"].as_u64().unwrap(),
            grid["y"].as_u64().unwrap(),
            grid["w"].as_u64().unwrap(),
            grid["h"].as_u64().unwrap(),
        );
        assert!(x + w <= 24, "{} is wider than the grid", panel["title"]);
        for row in y..y + h {
            for column in x..x + w {
                assert!(
                    cells.insert((row, column)),
                    "{} overlaps another panel at ({column}, {row})",
                    panel["title"]
                );
            }
        }
    }
}

#[test]
fn alert_rules_pass_promtool_check_and_their_unit_tests() {
    let Some(promtool_path) = promtool_or_skip() else {
        return;
    };
    let dir = deploy("prometheus");
    let checked = promtool(&promtool_path, &dir, &["check", "rules", "alerts.yml"]);
    assert!(checked.contains("SUCCESS"), "{checked}");
    let tested = promtool(&promtool_path, &dir, &["test", "rules", "alerts_test.yml"]);
    assert!(tested.contains("SUCCESS"), "{tested}");
}

#[test]
fn every_dashboard_query_parses_in_promtool() {
    let Some(promtool_path) = promtool_or_skip() else {
        return;
    };
    // promtool parses PromQL only inside rules: each query becomes a
    // recording rule, Grafana's variables replaced by what they expand to.
    let queries = dashboard_queries(&dashboard());
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (index, query) in queries.iter().enumerate() {
        let expr = query
            .replace("$__rate_interval", "1m")
            .replace("$instance", ".*")
            .replace("$cell", ".*");
        let expr = if let Some(inner) = expr
            .strip_prefix("label_values(")
            .and_then(|rest| rest.strip_suffix(')'))
        {
            // A variable's label_values(metric, label) lists the metric.
            inner.split(',').next().unwrap().trim().to_owned()
        } else {
            expr
        };
        assert!(!expr.contains('$'), "an unexpanded variable in {query}");
        rules.push_str(&format!(
            "      - record: dashboard:query_{index}\n        expr: {}\n",
            serde_json::to_string(&expr).unwrap()
        ));
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("dashboard.yml"), rules).unwrap();
    let checked = promtool(
        &promtool_path,
        dir.path(),
        &["check", "rules", "dashboard.yml"],
    );
    assert!(
        checked.contains(&format!("SUCCESS: {} rules found", queries.len())),
        "{checked}"
    );
}
