//! The tenant store's schema, version by version, and the SQL every call
//! sends (always with bind parameters: nothing a tenant id holds is ever
//! spliced into a statement).
//!
//! Writers are serialised by one advisory lock taken before a change is
//! given its number and held until commit, so change numbers commit in
//! order: a reader that has seen change `n` has seen every change before
//! it, and a change counter read in one snapshot is a safe high-water mark.

/// The schema version this build reads and writes.
pub(super) const VERSION: i32 = 1;

/// The advisory lock `init-schema` holds, so that two at once do not race
/// (an arbitrary constant: "shuffle-shard schema").
pub(super) const SCHEMA_LOCK: i64 = 0x5353_5343_4845_4d41;

/// The advisory lock every writer holds from its first change to its
/// commit (see the module docs).
pub(super) const WRITE_LOCK: i64 = 0x5353_5445_4e41_4e54;

/// The channel every change is announced on, with its number as payload.
pub const CHANNEL: &str = "shuffle_shard_tenants";

/// Version 1, created in one transaction. `{WRITE_LOCK}` is replaced by
/// the constant above (a number of ours, never input).
const V1: &str = r#"
CREATE TABLE shuffle_shard_tenants (
    id text PRIMARY KEY,
    api_key_sha256 text UNIQUE,
    cell text,
    k int,
    shards text[],
    max_in_flight int,
    requests_per_second float8,
    burst int,
    seq bigint NOT NULL DEFAULT 0
);
CREATE SEQUENCE shuffle_shard_tenant_seq;
CREATE TABLE shuffle_shard_tenant_changes (
    seq bigint PRIMARY KEY,
    tenant_id text NOT NULL,
    at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX shuffle_shard_tenant_changes_at ON shuffle_shard_tenant_changes (at);
-- How far the change log has been pruned: a reader behind this must load
-- everything again.
CREATE TABLE shuffle_shard_tenant_pruned (through bigint NOT NULL);
INSERT INTO shuffle_shard_tenant_pruned VALUES (0);

-- Before a row is written: take the writers' lock, then number the change
-- (an ON CONFLICT that changes nothing burns a number, which is harmless).
CREATE FUNCTION shuffle_shard_tenant_number() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock({WRITE_LOCK});
    NEW.seq := nextval('shuffle_shard_tenant_seq');
    RETURN NEW;
END $$;
CREATE TRIGGER shuffle_shard_tenant_number
    BEFORE INSERT OR UPDATE ON shuffle_shard_tenants
    FOR EACH ROW EXECUTE FUNCTION shuffle_shard_tenant_number();

-- After a row really changed: log it and announce it.
CREATE FUNCTION shuffle_shard_tenant_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    number bigint;
BEGIN
    PERFORM pg_advisory_xact_lock({WRITE_LOCK});
    IF TG_OP = 'DELETE' OR (TG_OP = 'UPDATE' AND OLD.id <> NEW.id) THEN
        number := nextval('shuffle_shard_tenant_seq');
        INSERT INTO shuffle_shard_tenant_changes (seq, tenant_id) VALUES (number, OLD.id);
    END IF;
    IF TG_OP <> 'DELETE' THEN
        number := NEW.seq;
        INSERT INTO shuffle_shard_tenant_changes (seq, tenant_id) VALUES (number, NEW.id);
    END IF;
    PERFORM pg_notify('shuffle_shard_tenants', number::text);
    RETURN NULL;
END $$;
CREATE TRIGGER shuffle_shard_tenant_changed
    AFTER INSERT OR UPDATE OR DELETE ON shuffle_shard_tenants
    FOR EACH ROW EXECUTE FUNCTION shuffle_shard_tenant_changed();

CREATE TABLE shuffle_shard_schema (version int NOT NULL);
INSERT INTO shuffle_shard_schema VALUES (1);
"#;

/// The statements that create version 1.
pub(super) fn v1() -> String {
    V1.replace("{WRITE_LOCK}", &WRITE_LOCK.to_string())
}

/// The columns of an entry, in the order [`super::row::entry`] reads them.
pub(super) const COLUMNS: &str =
    "id, api_key_sha256, cell, k, shards, max_in_flight, requests_per_second, burst";

/// Whether the schema table exists (it cannot be read in the same
/// statement: a missing table fails the whole statement). Read from the
/// catalog with the statement's snapshot, not `to_regclass`: its cache is
/// not refreshed by an advisory lock, so after waiting for another
/// `init-schema` it could still say "missing".
pub(super) const SCHEMA_EXISTS: &str = "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_tables \
    WHERE tablename = 'shuffle_shard_schema' AND schemaname = ANY (current_schemas(false)))";

/// The version the database holds.
pub(super) const READ_VERSION: &str = "SELECT max(version) FROM shuffle_shard_schema";

/// Every tenant, in id order.
pub(super) fn select_all() -> String {
    format!("SELECT {COLUMNS} FROM shuffle_shard_tenants ORDER BY id")
}

/// One tenant.
pub(super) fn select_one() -> String {
    format!("SELECT {COLUMNS} FROM shuffle_shard_tenants WHERE id = $1")
}

/// The tenants named in an array.
pub(super) fn select_many() -> String {
    format!("SELECT {COLUMNS} FROM shuffle_shard_tenants WHERE id = ANY($1)")
}

/// The change counter: the newest change committed (pruning always keeps
/// the newest, so an idle hour does not reset it).
pub(super) const CURRENT_SEQ: &str = "SELECT greatest(\
    (SELECT coalesce(max(seq), 0) FROM shuffle_shard_tenant_changes), \
    (SELECT through FROM shuffle_shard_tenant_pruned))";

/// The changes after `$1`, oldest first, at most `$2`.
pub(super) const CHANGES: &str = "SELECT seq, tenant_id FROM shuffle_shard_tenant_changes \
    WHERE seq > $1 ORDER BY seq LIMIT $2";

/// How far the log was pruned.
pub(super) const PRUNED_THROUGH: &str = "SELECT through FROM shuffle_shard_tenant_pruned";

/// An upsert that writes nothing (and logs no change) when the row already
/// holds these values: `inserted` says which of the other two it was.
pub(super) fn upsert() -> String {
    format!(
        "INSERT INTO shuffle_shard_tenants AS t ({COLUMNS}) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
         ON CONFLICT (id) DO UPDATE SET {} \
         RETURNING (xmax = 0) AS inserted",
        update_changed()
    )
}

/// A batch upsert from one JSON array of entries (a bind parameter, so one
/// statement and one round trip for the whole batch); ids are unique
/// within a batch (ON CONFLICT cannot touch a row twice in one statement).
pub(super) fn upsert_batch() -> String {
    format!(
        "INSERT INTO shuffle_shard_tenants AS t ({COLUMNS}) \
         SELECT b.id, b.api_key_sha256, b.cell, b.k, \
                CASE WHEN b.shards IS NULL THEN NULL \
                     ELSE ARRAY(SELECT jsonb_array_elements_text(b.shards)) END, \
                b.max_in_flight, b.requests_per_second, b.burst \
         FROM jsonb_to_recordset($1::text::jsonb) \
              AS b(id text, api_key_sha256 text, cell text, k int, shards jsonb, \
                   max_in_flight int, requests_per_second float8, burst int) \
         ON CONFLICT (id) DO UPDATE SET {}",
        update_changed()
    )
}

/// `SET` every column from `excluded`, `WHERE` one of them differs (so an
/// unchanged row is not written, numbered or announced).
fn update_changed() -> String {
    let assign: Vec<String> = DATA.iter().map(|c| format!("{c} = excluded.{c}")).collect();
    let old: Vec<String> = DATA.iter().map(|c| format!("t.{c}")).collect();
    let new: Vec<String> = DATA.iter().map(|c| format!("excluded.{c}")).collect();
    format!(
        "{} WHERE ({}) IS DISTINCT FROM ({})",
        assign.join(", "),
        old.join(", "),
        new.join(", ")
    )
}

/// The columns besides the id.
const DATA: [&str; 7] = [
    "api_key_sha256",
    "cell",
    "k",
    "shards",
    "max_in_flight",
    "requests_per_second",
    "burst",
];

/// Deletes one tenant.
pub(super) const DELETE: &str = "DELETE FROM shuffle_shard_tenants WHERE id = $1";

/// The number of tenants.
pub(super) const COUNT: &str = "SELECT count(*) FROM shuffle_shard_tenants";

/// The planner's estimate of the number of tenants (-1 before the table was
/// first analysed): free, where `count(*)` reads the whole table.
pub(super) const ESTIMATE: &str =
    "SELECT reltuples::bigint FROM pg_class WHERE oid = 'shuffle_shard_tenants'::regclass";

/// Drops changes older than `$1` seconds (float8), except the newest, and
/// records how far it went (no row when nothing was old enough).
pub(super) const PRUNE: &str = "WITH gone AS ( \
        DELETE FROM shuffle_shard_tenant_changes \
        WHERE at < now() - make_interval(secs => $1) \
          AND seq < (SELECT max(seq) FROM shuffle_shard_tenant_changes) \
        RETURNING seq) \
    UPDATE shuffle_shard_tenant_pruned SET through = greatest(through, (SELECT max(seq) FROM gone)) \
    WHERE EXISTS (SELECT 1 FROM gone) \
    RETURNING through";
