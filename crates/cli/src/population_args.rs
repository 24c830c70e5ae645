//! The tenant population an analyser runs over: `--tenants T` synthetic
//! tenants, `--tenants-file PATH` (a plain list, or a gateway tenants file)
//! or `--tenants-store URL` (the gateway's PostgreSQL tenant store), exactly
//! one of them.
//!
//! A gateway tenants file or the store describes the population being
//! served, own `k` and dedicated shards included: those come back as
//! placement rules that [`Tenants::apply`] gives the placer, so the model
//! places every tenant where the gateway does.

mod served;

use std::collections::HashSet;
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};

use analysis::{AnalysisError, Placements, Population};
use anyhow::{Context, Result, anyhow, bail};
use clap::Args;
use gateway::tenants::files::Format;
use placement::{Placer, TenantOverride};

use crate::placement_args::{PlacementArgs, PlacementSetup};
use crate::progress::Bars;
use served::{Rule, Served};

/// The most tenants a command analyses.
///
/// The analysers keep every tenant's subset in memory (four bytes per
/// member), so an accidental `--tenants 10000000000000` would abort on a
/// failed allocation instead of answering. A hundred million tenants is ten
/// times the largest population the analyser is built for.
pub const MAX_TENANTS: usize = 100_000_000;

/// Where the tenants come from.
#[derive(Debug, Args)]
pub struct PopulationArgs {
    #[command(flatten)]
    source: SourceArgs,

    /// Check the tenant store's TLS certificate against this CA file (PEM);
    /// implies TLS (with --tenants-store)
    // `conflicts_with_all` rather than `requires`: clap drops a requirement
    // that conflicts with an argument present, as `--tenants-store` does
    // with `--tenants`, so `requires` alone would let the flag pass unused.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["tenants", "tenants_file"])]
    ca_file: Option<PathBuf>,
}

/// The three sources, of which clap takes exactly one.
#[derive(Debug, Args)]
#[group(id = "population", required = true, multiple = false)]
struct SourceArgs {
    /// Analyse T synthetic tenants with ids tenant-0 to tenant-{T-1}
    #[arg(long, value_name = "T")]
    tenants: Option<usize>,

    /// Analyse the tenants listed in a file: one id per line, optionally
    /// followed by a TAB and a weight; or a gateway tenants file (.jsonl or
    /// .toml), with each tenant's own k or dedicated shards
    ///
    /// A weight is that tenant's traffic share (any positive number; only
    /// ratios matter). Either every tenant has a weight or none does. Blank
    /// lines and lines starting with '#' are skipped. A file ending in
    /// .jsonl (one JSON object per line) or .toml ([[tenants]] entries) is
    /// read as the gateway reads its tenants_file: the tenants are its ids,
    /// in order, unweighted, and an entry's k or shards places that tenant
    /// as the gateway does (a --tenant-k for the same tenant wins).
    #[arg(long, value_name = "PATH")]
    tenants_file: Option<PathBuf>,

    /// Analyse the tenants of the gateway's tenant store:
    /// postgres://user[:password]@host:port/database (the password may come
    /// from PGPASSWORD instead)
    ///
    /// Every tenant in the store, with its own k or dedicated shards, as
    /// the gateway loads them; rows the gateway would skip are skipped and
    /// counted in a note. Add ?sslmode=verify-full or --ca-file for TLS.
    #[arg(long, value_name = "URL", value_parser = store_url)]
    tenants_store: Option<StoreUrl>,
}

/// A tenant store URL as typed, which may hold a password: `Debug` shows
/// none of it, and only the gateway's `PostgresUrl` (whose `Display` leaves
/// the password out) ever names it in a message.
#[derive(Clone)]
pub struct StoreUrl(String);

impl std::fmt::Debug for StoreUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StoreUrl(<redacted>)")
    }
}

/// Takes any text: the URL is checked when it is used, so that a mistake
/// gets the one-line error of every other bad input rather than clap's
/// usage error, which would repeat the value and with it the password.
fn store_url(text: &str) -> Result<StoreUrl, std::convert::Infallible> {
    Ok(StoreUrl(text.to_owned()))
}

/// A loaded population, with the placement rules of the tenants that have
/// their own (from a gateway tenants file or the store) and the notes to
/// print once the answer is out.
#[derive(Debug)]
pub struct Tenants {
    pub population: Population,
    rules: Vec<Rule>,
    /// What the rules came from, for errors: a file's path, or the store.
    source: String,
    notes: Vec<String>,
    /// Rules the last [`Tenants::apply`] gave the placer.
    applied: usize,
}

impl PopulationArgs {
    /// Reads the population from whichever source was given.
    pub fn load(&self) -> Result<Tenants> {
        let SourceArgs {
            tenants,
            tenants_file,
            tenants_store,
        } = &self.source;
        match (tenants, tenants_file, tenants_store) {
            (Some(0), _, _) => {
                bail!("--tenants 0 leaves nothing to analyse; pass --tenants 1 or more")
            }
            (Some(count), _, _) if *count > MAX_TENANTS => bail!(
                "--tenants {count} is more than the {MAX_TENANTS} tenants this command supports; check the number"
            ),
            (Some(count), _, _) => Ok(Tenants::plain(Population::synthetic(*count))),
            (None, Some(path), _) if gateway_file(path) => {
                let served = served::read_file(path).context("--tenants-file")?;
                Ok(Tenants::served(served, path.display().to_string()))
            }
            (None, Some(path), _) => Ok(Tenants::plain(read_list(path)?)),
            (None, None, Some(StoreUrl(url))) => {
                let served =
                    served::read_store(url, self.ca_file.as_deref()).context("--tenants-store")?;
                Ok(Tenants::served(served, "the tenant store".into()))
            }
            // clap requires exactly one; this keeps the function total
            // rather than trusting that.
            (None, None, None) => bail!(
                "give the tenants with --tenants T, --tenants-file PATH or --tenants-store URL"
            ),
        }
    }
}

/// Whether `--tenants-file` names a gateway tenants file: `.jsonl` or
/// `.toml`, the names the gateway's `tenants_file` takes. Any other name is
/// the plain list, as it always was.
fn gateway_file(path: &Path) -> bool {
    let toml = path.extension().is_some_and(|ext| ext == "toml");
    toml || Format::of(path) == Format::JsonLines
}

/// Reads a plain list: one id per line, optionally with a TAB and a weight.
fn read_list(path: &Path) -> Result<Population> {
    let bytes = std::fs::read(path).map_err(|error| {
        anyhow!(
            "cannot read tenants file {}: {error}; check the path",
            path.display()
        )
    })?;
    let text = String::from_utf8(bytes).map_err(|error| {
        anyhow!(
            "tenants file {} is not valid UTF-8 (at byte {}); tenant ids must be UTF-8",
            path.display(),
            error.utf8_error().valid_up_to()
        )
    })?;
    let population =
        Population::parse(&text).with_context(|| format!("--tenants-file {}", path.display()))?;
    if population.len() > MAX_TENANTS {
        bail!(
            "tenants file {} lists {} tenants, more than the {MAX_TENANTS} this command supports",
            path.display(),
            population.len()
        );
    }
    Ok(population)
}

impl Tenants {
    /// A population with no rules of its own (synthetic, or a plain list).
    fn plain(population: Population) -> Self {
        Self {
            population,
            rules: Vec::new(),
            source: String::new(),
            notes: Vec::new(),
            applied: 0,
        }
    }

    /// What a gateway tenants file or the store served, with notes on what
    /// the model leaves out.
    fn served(served: Served, source: String) -> Self {
        let mut notes = Vec::new();
        let in_cells: u64 = served.cells.values().sum();
        if in_cells > 0 {
            // The analyser models one fleet; a gateway with cells serves
            // each cell's tenants on that cell's shards alone.
            let names: Vec<&str> = served.cells.keys().map(String::as_str).collect();
            notes.push(format!(
                "note: {} of {source} {} a cell ({}); the model places every tenant on the one fleet of --shards/--zones, so analyse a cell's tenants against that cell's shards for figures per cell",
                counted(in_cells, "tenant", "tenants"),
                agree(in_cells, "names", "name"),
                names.join(", ")
            ));
        }
        if served.skipped > 0 {
            notes.push(format!(
                "note: skipped {} of {source} that the gateway does not load either (e.g. {}); fix them in the store",
                counted(served.skipped, "row", "rows"),
                served.first_skipped.as_deref().unwrap_or("?")
            ));
        }
        Self {
            population: Population::listed(served.ids, None),
            rules: served.rules,
            source,
            notes,
            applied: 0,
        }
    }

    /// Where a rule was written, for an error about it.
    fn origin(&self, rule: &Rule) -> String {
        match rule.at {
            Some(at) => format!("{}: {at}", self.source),
            None => self.source.clone(),
        }
    }

    /// Gives `placer` each tenant's own `k` or dedicated shards, except for
    /// the tenants a `--tenant-k` in `cli` names (`None` where the command
    /// has no `--tenant-k`): a what-if typed on the command line wins over
    /// what is served. A tenant whose dedicated shards are not all shards
    /// of this fleet is placed at the default `k`, with a note: the
    /// analyser's shards are numbered, the gateway's named.
    pub fn apply(&mut self, placer: &mut Placer, cli: Option<&[(String, u32)]>) -> Result<()> {
        let named: HashSet<&str> = cli
            .unwrap_or_default()
            .iter()
            .map(|(tenant, _)| tenant.as_str())
            .collect();
        // Which rules the fleet can take is settled first, while the
        // placer is only read.
        let fleet = placer.fleet();
        let mut foreign: Option<(usize, &Rule)> = None;
        let mut chosen = Vec::with_capacity(self.rules.len());
        for rule in &self.rules {
            if named.contains(rule.tenant.as_str()) {
                continue;
            }
            if let TenantOverride::Dedicated(ids) = &rule.rule
                && !ids.iter().all(|id| fleet.index_of(id).is_some())
            {
                foreign.get_or_insert((0, rule)).0 += 1;
                continue;
            }
            chosen.push(rule);
        }
        let foreign = foreign.map(|(count, rule)| {
            let ids = match &rule.rule {
                TenantOverride::Dedicated(ids) => ids.join(","),
                TenantOverride::K(_) => String::new(),
            };
            let ends = [0, fleet.len() as u32 - 1];
            let ends: Vec<&str> = fleet.ids(&ends).collect();
            format!(
                "note: {} of {} {} dedicated shards this fleet does not have (e.g. {:?} on {ids}; this fleet's shards are {} to {}), so the model places {} at k like the others",
                counted(count as u64, "tenant", "tenants"),
                self.source,
                agree(count as u64, "has", "have"),
                rule.tenant,
                ends[0],
                ends[1],
                agree(count as u64, "it", "them")
            )
        });
        let n = fleet.len();
        for rule in &chosen {
            placer
                .set_override(&rule.tenant, rule.rule.clone())
                .map_err(|error| match rule.rule {
                    TenantOverride::K(k) => self.k_refused(rule, k, n, cli.is_some()),
                    TenantOverride::Dedicated(_) => {
                        anyhow!("{}: {error}; fix the entry's shards", self.origin(rule))
                    }
                })?;
        }
        let applied = chosen.len();
        if let Some(note) = foreign {
            self.note(note);
        }
        self.applied = applied;
        Ok(())
    }

    /// The tenants' own `k`s with `cli`'s `--tenant-k` overrides (which
    /// win), for `plan`, which fixes them at every candidate `k`: a `k`
    /// larger than the fleet is refused, as [`Tenants::apply`] refuses it.
    /// Dedicated shards cannot be held fixed while `k` varies: those
    /// tenants are measured at each candidate, with a note.
    pub fn k_overrides(
        &mut self,
        cli: &[(String, u32)],
        shards: usize,
    ) -> Result<Vec<(String, u32)>> {
        let named: HashSet<&str> = cli.iter().map(|(tenant, _)| tenant.as_str()).collect();
        let mut overrides = cli.to_vec();
        let mut dedicated = 0_u64;
        for rule in &self.rules {
            if named.contains(rule.tenant.as_str()) {
                continue;
            }
            match rule.rule {
                TenantOverride::K(k) if k == 0 || k as usize > shards => {
                    return Err(self.k_refused(rule, k, shards, true));
                }
                TenantOverride::K(k) => overrides.push((rule.tenant.clone(), k)),
                TenantOverride::Dedicated(_) => dedicated += 1,
            }
        }
        if dedicated > 0 {
            self.note(format!(
                "note: {} of {} {} dedicated shards, which plan cannot hold fixed while k varies; it measures {} at each candidate k like the others",
                counted(dedicated, "tenant", "tenants"),
                self.source,
                agree(dedicated, "has", "have"),
                agree(dedicated, "it", "them")
            ));
        }
        self.applied = overrides.len() - cli.len();
        Ok(overrides)
    }

    /// The error for a tenant whose own `k` this fleet of `shards` cannot
    /// hold. The fleet may be a what-if smaller than the one serving, so
    /// the fix offered is the model's (with `--tenant-k` where the command
    /// has it), unless no fleet could hold it.
    fn k_refused(&self, rule: &Rule, k: u32, shards: usize, typed: bool) -> anyhow::Error {
        let origin = self.origin(rule);
        let tenant = &rule.tenant;
        if k == 0 {
            return anyhow!(
                "{origin}: tenant {tenant:?} has k = 0, which places it on no shard; give it k = 1 or more (the gateway refuses k = 0 too)"
            );
        }
        let instead = if typed {
            format!(", or another k for it with --tenant-k {tenant}=K")
        } else {
            String::new()
        };
        anyhow!(
            "{origin}: tenant {tenant:?} has k = {k}, more than the {shards} shards of this fleet; model a fleet of {k} shards or more{instead}"
        )
    }

    /// How many of the tenants' own rules the last [`Tenants::apply`] or
    /// [`Tenants::k_overrides`] used.
    pub fn applied(&self) -> usize {
        self.applied
    }

    fn note(&mut self, note: String) {
        // `migrate` applies the rules to several placers; say it once.
        if !self.notes.contains(&note) {
            self.notes.push(note);
        }
    }

    /// Prints the notes on stderr: after the answer, like the key note, so
    /// that a run that fails prints only its error.
    pub fn print_notes(&self) {
        let mut stderr = io::stderr().lock();
        for note in &self.notes {
            // Nothing useful can be done if stderr is gone; notes are advice.
            let _ = writeln!(stderr, "{note}");
        }
    }
}

/// `1 tenant`, `2 tenants`.
fn counted(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", agree(n, one, many))
}

/// The word that agrees with `n`.
fn agree<'a>(n: u64, one: &'a str, many: &'a str) -> &'a str {
    if n == 1 { one } else { many }
}

/// The placer `placement` describes and the population `population` names,
/// with every tenant's own `k` (its entry's, then `--tenant-k`) applied to
/// the placer: what `plan-waves` and `report` place with.
pub fn placed(
    placement: &PlacementArgs,
    population: &PopulationArgs,
) -> Result<(PlacementSetup, Tenants)> {
    let mut setup = placement.placer()?;
    let mut tenants = population.load()?;
    let typed = placement.overrides()?;
    check_overrides(&typed, &tenants.population)?;
    tenants.apply(&mut setup.placer, Some(&typed))?;
    Ok((setup, tenants))
}

/// Refuses a `--tenant-k` for a tenant the population does not have (the
/// check lives in the analysis crate, so Python refuses it too).
pub fn check_overrides(overrides: &[(String, u32)], population: &Population) -> Result<()> {
    analysis::answers::check_overrides(overrides, population).map_err(|error| match &error {
        AnalysisError::OverrideForAbsentTenant { tenant, k, .. } => {
            anyhow!(
                "--tenant-k {tenant}={k}: {error}; name a tenant of --tenants, --tenants-file or --tenants-store"
            )
        }
        _ => anyhow!(error),
    })
}

/// Places every tenant of `population`, with progress: the first step of
/// each command that analyses a placed population, labelled the same in all.
pub fn place_all(placer: &Placer, population: &Population) -> Placements {
    analysis::answers::place_all(placer, population, &Bars)
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use placement::{Algorithm, Fleet, PlacementConfig, PlacementKey};

    use super::*;

    fn file(contents: &[u8]) -> tempfile::NamedTempFile {
        file_named(contents, "")
    }

    fn file_named(contents: &[u8], suffix: &str) -> tempfile::NamedTempFile {
        let mut file = tempfile::Builder::new().suffix(suffix).tempfile().unwrap();
        file.write_all(contents).unwrap();
        file.flush().unwrap();
        file
    }

    fn args(tenants: Option<usize>, tenants_file: Option<PathBuf>) -> PopulationArgs {
        PopulationArgs {
            source: SourceArgs {
                tenants,
                tenants_file,
                tenants_store: None,
            },
            ca_file: None,
        }
    }

    fn from_file(file: &tempfile::NamedTempFile) -> PopulationArgs {
        args(None, Some(file.path().to_owned()))
    }

    fn placer(shards: u32, k: u32) -> Placer {
        let config = PlacementConfig {
            algorithm: Algorithm::HmacModulo,
            k,
            zone_aware: false,
        };
        Placer::new(
            Fleet::uniform(shards).unwrap(),
            &PlacementKey::recipe_default(),
            config,
        )
        .unwrap()
    }

    #[test]
    fn synthetic_counts() {
        assert_eq!(args(Some(3), None).load().unwrap().population.len(), 3);
        for bad in [0, MAX_TENANTS + 1] {
            assert!(args(Some(bad), None).load().is_err(), "{bad}");
        }
    }

    #[test]
    fn files_parse_and_errors_name_the_problem() {
        let good = file(b"acme\t2\nglobex\t1\n");
        let tenants = from_file(&good).load().unwrap();
        assert_eq!(tenants.population.weights(), Some(&[2.0, 1.0][..]));

        let empty = file(b"\n# nobody\n");
        let error = format!("{:#}", from_file(&empty).load().unwrap_err());
        assert!(error.contains("has no tenants"), "{error}");

        let bad_weight = file(b"a\t1\nb\theavy\n");
        let error = format!("{:#}", from_file(&bad_weight).load().unwrap_err());
        assert!(error.contains("line 2"), "{error}");

        let binary = file(b"a\n\xff\n");
        let error = format!("{:#}", from_file(&binary).load().unwrap_err());
        assert!(error.contains("not valid UTF-8"), "{error}");

        let missing = args(None, Some("/nonexistent/shuffle-shard/tenants".into()));
        let error = format!("{:#}", missing.load().unwrap_err());
        assert!(
            error.contains("/nonexistent/shuffle-shard/tenants"),
            "{error}"
        );
    }

    #[test]
    fn gateway_files_are_told_by_their_extension() {
        assert!(gateway_file(Path::new("tenants.jsonl")));
        assert!(gateway_file(Path::new("dir/tenants.toml")));
        for plain in ["tenants.txt", "tenants.tsv", "tenants", "tenants.json"] {
            assert!(!gateway_file(Path::new(plain)), "{plain}");
        }
    }

    #[test]
    fn own_k_and_dedicated_shards_reach_the_placer() {
        let jsonl = file_named(
            concat!(
                r#"{"id":"plain"}"#,
                "\n",
                r#"{"id":"whale","k":5}"#,
                "\n",
                r#"{"id":"vip","shards":["6","2"]}"#,
                "\n",
                r#"{"id":"named","shards":["s1"]}"#,
                "\n",
                r#"{"id":"typed","k":7}"#,
                "\n",
            )
            .as_bytes(),
            ".jsonl",
        );
        let mut tenants = from_file(&jsonl).load().unwrap();
        assert_eq!(tenants.population.len(), 5);
        assert_eq!(tenants.population.weights(), None);
        let mut placer = placer(8, 2);
        // A --tenant-k wins over the entry's own k.
        let cli = [("typed".to_owned(), 3)];
        placer.set_override("typed", TenantOverride::K(3)).unwrap();
        tenants.apply(&mut placer, Some(&cli)).unwrap();
        assert_eq!(tenants.applied(), 2);
        assert_eq!(placer.subset("whale").len(), 5);
        assert_eq!(placer.subset("vip"), [6, 2]);
        assert_eq!(placer.subset("named").len(), 2);
        assert_eq!(placer.subset("typed").len(), 3);
        assert_eq!(tenants.notes.len(), 1, "{:?}", tenants.notes);
        assert!(
            tenants.notes[0].contains("1 tenant of") && tenants.notes[0].contains("places it at k"),
            "{:?}",
            tenants.notes
        );
        assert!(
            tenants.notes[0].contains("\"named\" on s1"),
            "{:?}",
            tenants.notes
        );

        let overrides = tenants.k_overrides(&cli, 8).unwrap();
        assert_eq!(
            overrides,
            [("typed".to_owned(), 3), ("whale".to_owned(), 5)]
        );
        assert!(
            tenants.notes[1].contains("2 tenants of") && tenants.notes[1].contains(" have "),
            "{:?}",
            tenants.notes
        );
    }

    #[test]
    fn an_own_k_the_fleet_cannot_hold_names_its_line() {
        let jsonl = file_named(b"{\"id\":\"a\"}\n\n{\"id\":\"b\",\"k\":9}\n", ".jsonl");
        let mut tenants = from_file(&jsonl).load().unwrap();
        let error = tenants
            .apply(&mut placer(8, 2), Some(&[]))
            .unwrap_err()
            .to_string();
        assert!(error.contains("line 3: tenant \"b\" has k = 9"), "{error}");
        assert!(error.contains("--tenant-k b=K"), "{error}");
        let error = tenants.k_overrides(&[], 8).unwrap_err().to_string();
        assert!(error.contains("line 3: tenant \"b\" has k = 9"), "{error}");
        // The command line may model it otherwise.
        let cli = [("b".to_owned(), 4)];
        assert!(tenants.k_overrides(&cli, 8).is_ok());

        let zero = file_named(b"{\"id\":\"z\",\"k\":0}\n", ".jsonl");
        let mut tenants = from_file(&zero).load().unwrap();
        let error = tenants
            .apply(&mut placer(8, 2), None)
            .unwrap_err()
            .to_string();
        assert!(error.contains("line 1: tenant \"z\" has k = 0"), "{error}");
        assert!(!error.contains("--tenant-k"), "{error}");
    }

    #[test]
    fn toml_tenants_files_are_read_as_the_gateway_reads_them() {
        let toml = file_named(
            b"[[tenants]]\nid = \"acme\"\nk = 3\ncell = \"eu\"\n\n[[tenants]]\nid = \"globex\"\n",
            ".toml",
        );
        let tenants = from_file(&toml).load().unwrap();
        assert_eq!(tenants.population.id(1), "globex");
        assert_eq!(tenants.rules.len(), 1);
        assert!(
            tenants.notes[0].contains("names a cell (eu)"),
            "{:?}",
            tenants.notes
        );
    }
}
