//! Tenant → cell, and each cell's placement: the second and third steps of
//! the request path (after the credential has named the tenant), and each
//! cell's live blast-radius model ([`live_blast`]).
//!
//! A cell is a complete fleet with its own placement (algorithm, `k`, key).
//! The [`Topology`] holds every cell's [`Placer`] with the tenants' overrides
//! applied, so routing a request is a map lookup and one placement. It sits
//! just above the configuration because it is the configuration's cells and
//! tenants, compiled: the snapshot builds it, and the request path, the
//! status page and the metrics only read it.

pub mod live_blast;

use http::HeaderValue;
use placement::{Placer, ShardIndex};

use crate::config::{CellSettings, ConfigError, GatewayConfig};
use crate::tenants::Tenant;

/// Where a configured tenant's requests go: its cell, its subset there, and
/// the header value that names the tenant to backends.
///
/// Placement is a pure function of the snapshot, so a route is computed the
/// first time a tenant is seen and reused by every later request until the
/// next reload, instead of hashing the tenant against the fleet per request.
#[derive(Debug)]
pub struct TenantRoute {
    /// The tenant's cell (an index into the topology).
    pub cell: usize,
    /// The tenant's subset, as shard indices in selection order.
    pub subset: Vec<ShardIndex>,
    /// Its lookback members: members of its subset before the last
    /// migration that are not in this one, in that subset's order (empty,
    /// which allocates nothing, without an open lookback or when the
    /// tenant did not move). Tried only after `subset`, while the window
    /// is open (see `state::Lookback`).
    pub lookback: Box<[ShardIndex]>,
    /// The tenant id as an `x-shuffle-tenant` value; tenant ids are checked
    /// to be visible ASCII when the tenants file is loaded, so it is only
    /// `None` for an id that check would have refused.
    pub tenant_header: Option<HeaderValue>,
}

/// A cell at run time.
#[derive(Debug)]
pub struct Cell {
    /// The cell's settings.
    pub settings: CellSettings,
    /// Its placer (tenants' own sizes and shards apply in [`Topology::route`]).
    pub placer: Placer,
}

/// Every cell, ready to route.
#[derive(Debug)]
pub struct Topology {
    cells: Vec<Cell>,
}

impl Topology {
    /// Builds every cell's placer. Tenants' own sizes and shards are not
    /// the placers': they stay in the registry and apply in [`Self::route`],
    /// so a change to one tenant never rebuilds a placer.
    pub fn build(config: &GatewayConfig) -> Result<Self, ConfigError> {
        let mut cells = Vec::with_capacity(config.cells.len());
        for settings in &config.cells {
            let placer = settings.placer().map_err(|e| {
                ConfigError::new(
                    &config.path,
                    format!("cells.{}", settings.name),
                    e.to_string(),
                )
            })?;
            cells.push(Cell {
                settings: settings.clone(),
                placer,
            });
        }
        Ok(Self { cells })
    }

    /// The index of the named cell, or of the default (first) cell when the
    /// name is absent. Names were validated when the tenants were loaded.
    pub fn cell_index(&self, name: Option<&str>) -> usize {
        name.and_then(|name| {
            self.cells
                .iter()
                .position(|cell| cell.settings.name == name)
        })
        .unwrap_or(0)
    }

    /// The index of a cell by name, if it exists.
    pub fn find(&self, name: &str) -> Option<usize> {
        self.cells
            .iter()
            .position(|cell| cell.settings.name == name)
    }

    /// The cells.
    pub fn cells(&self) -> &[Cell] {
        &self.cells
    }

    /// A tenant's subset in a cell, as shard indices in selection order.
    pub fn subset(&self, cell: usize, tenant: &str) -> Vec<ShardIndex> {
        self.cells[cell].placer.subset(tenant)
    }

    /// A registered tenant's subset in its cell, in selection order: its
    /// dedicated shards, or its own `k` (else the cell's) placed.
    pub fn tenant_subset(&self, tenant: Tenant<'_>) -> Vec<ShardIndex> {
        let mut out = Vec::new();
        self.tenant_subset_into(tenant, &mut out);
        out
    }

    /// [`Self::tenant_subset`] into a caller-owned buffer.
    pub fn tenant_subset_into(&self, tenant: Tenant<'_>, out: &mut Vec<ShardIndex>) {
        out.clear();
        if let Some(shards) = tenant.shards() {
            out.extend_from_slice(shards);
            return;
        }
        let placer = &self.cells[tenant.cell_index()].placer;
        let k = tenant.k().unwrap_or(placer.config().k);
        placer
            .subset_of_size_into(tenant.id(), k, out)
            .expect("a tenant's k was checked against its cell when it was registered");
    }

    /// A registered tenant's route: its cell and its subset there.
    pub fn route(&self, tenant: Tenant<'_>) -> TenantRoute {
        TenantRoute {
            cell: tenant.cell_index(),
            subset: self.tenant_subset(tenant),
            lookback: Box::default(),
            tenant_header: HeaderValue::from_str(tenant.id()).ok(),
        }
    }
}
