//! The API scenarios, each twice: as HTTP requests for wrk (`<key>\t<path>` lines, one
//! picked at random per request) and as a pgbench script running the very statement
//! the API sends, taken from `lectern_api::listing::query::list_sql` so it cannot drift.
//!
//! pgbench cannot draw a random UUID, so a random workspace becomes a scalar subquery
//! on a small lookup table where the API binds a parameter (an InitPlan of one index
//! probe); a fixed workspace is bound exactly as the API binds it. Every scenario runs
//! `-M prepared`, as the API prepares every statement, and with the `plan_cache_mode`
//! of the API's connection for it: planned searches plan each execution for its
//! pattern (`force_custom_plan`); listings, retrieves and the walk the API sends for a
//! search in a small workspace (`SearchShape::Walk`) keep one generic plan
//! (`force_generic_plan`).

use lectern_api::listing::query::{list_sql, SearchShape};
use lectern_api::listing::workspace_sizes::WalkSettings;
use lectern_api::listing::{Limit, ListRequest, Position, SearchText, SortKey};
use lectern_api::reads::connections::PlanMode;
use lectern_api::resources::contacts::{ContactType, Contacts};
use lectern_api::resources::items::{ItemKind, Items};
use lectern_api::resources::Resource;
use sqlx::PgPool;
use uuid::Uuid;

use super::{Context, Result};
use lectern_fixtures::generator::plan::{Entity, Plan, Record};
use lectern_fixtures::generator::records::contact;

pub struct Scenario {
    pub name: String,
    /// (API key, path and query)
    pub requests: Vec<(String, String)>,
    pub script: String,
    /// `-D name=value` for pgbench.
    pub defines: Vec<(String, String)>,
    /// pgbench's `plan_cache_mode`, as the API's connection for the statement has it.
    pub plan_cache_mode: &'static str,
}

/// What the scenarios need to know about the loaded data.
pub struct Inputs<'a> {
    pub plan: &'a Plan,
    /// One per workspace, in the plan's order.
    pub keys: &'a [String],
    pub deep_cursor: &'a str,
    pub deep_position: &'a Position,
    /// Contacts to retrieve by id, also in the `bench_contacts` lookup table.
    pub sample: &'a [Record],
}

const COMMON: &str = "gmbh";
const RANDOM_WORKSPACE: &str = "(select workspace_id from bench_workspaces where n = :w)";

pub fn all(inputs: &Inputs<'_>) -> Result<Vec<Scenario>> {
    let (plan, big) = (inputs.plan, inputs.plan.big().id);
    let small = |path: &str| -> Vec<(String, String)> {
        inputs.keys[1..].iter().map(|key| (key.clone(), path.to_owned())).collect()
    };
    let big_key = |path: String| vec![(inputs.keys[0].clone(), path)];
    let rare = rare_term(plan);
    // The nil workspace stands for "a random small workspace".
    let contacts = |workspace_id, search: Option<&str>, sort, after| -> Result<ListRequest<ContactType>> {
        let search = search.map(str::parse::<SearchText>).transpose()?;
        Ok(ListRequest { workspace_id, search, kind: ContactType::All, sort, limit: Limit::default(), after })
    };
    let (created, name, nil) = (SortKey::CreatedAt, SortKey::Name, Uuid::nil());
    let deep = Some(inputs.deep_position.clone());
    let items = ListRequest {
        workspace_id: nil,
        search: None,
        kind: ItemKind::All,
        sort: created,
        limit: Limit::default(),
        after: None,
    };
    let search = format!("/v1/contacts?search={COMMON}");
    Ok(vec![
        listing::<Contacts>(
            "contacts: first page, random small workspace",
            small("/v1/contacts"),
            &contacts(nil, None, created, None)?,
            plan,
        )?,
        listing::<Contacts>(
            "contacts: deep keyset page (¾ through), big workspace",
            big_key(format!("/v1/contacts?cursor={}", inputs.deep_cursor)),
            &contacts(big, None, created, deep)?,
            plan,
        )?,
        listing::<Contacts>(
            "contacts: sort=name first page, random small workspace",
            small("/v1/contacts?sort=name"),
            &contacts(nil, None, name, None)?,
            plan,
        )?,
        listing::<Contacts>(
            &format!("contacts: search \"{COMMON}\", random small workspace"),
            small(&search),
            &contacts(nil, Some(COMMON), created, None)?,
            plan,
        )?,
        listing::<Contacts>(
            &format!("contacts: search common \"{COMMON}\", big workspace"),
            big_key(search.clone()),
            &contacts(big, Some(COMMON), created, None)?,
            plan,
        )?,
        listing::<Contacts>(
            &format!("contacts: search rare \"{rare}\", big workspace"),
            big_key(format!("/v1/contacts?search={rare}")),
            &contacts(big, Some(&rare), created, None)?,
            plan,
        )?,
        retrieve(inputs)?,
        listing::<Items>("items: first page, random small workspace", small("/v1/items"), &items, plan)?,
    ])
}

/// A listing scenario: the API's statement, its parameters named in the same order
/// `list_sql` binds them; a nil workspace is drawn at random from the small ones.
fn listing<R: Resource>(
    name: &str,
    requests: Vec<(String, String)>,
    request: &ListRequest<R::Kind>,
    plan: &Plan,
) -> Result<Scenario> {
    let workspace = (!request.workspace_id.is_nil()).then_some(request.workspace_id);
    let shape = search_shape(request, plan);
    let builder = list_sql::<R>(request, shape);
    let workspace_bind = if workspace.is_some() { ":ws" } else { RANDOM_WORKSPACE };
    let mut binds = vec![workspace_bind];
    let mut defines = vec![("limit".to_owned(), (request.limit.get() + 1).to_string())];
    if let Some(workspace) = workspace {
        defines.push(("ws".to_owned(), workspace.to_string()));
    }
    if let Some(search) = &request.search {
        if search.as_str().contains('\n') {
            return Err("a search with a newline binds its pattern once per field; not a scenario here".into());
        }
        // A search binds the workspace again, for the query that picks the page's ids;
        // a walk binds the term as it is, a planned search as a LIKE pattern.
        binds.extend([workspace_bind, ":pattern"]);
        let pattern = match shape {
            SearchShape::Walk => search.as_str().to_owned(),
            SearchShape::Planned => search.like_escaped(),
        };
        defines.push(("pattern".to_owned(), pattern));
    }
    match &request.after {
        Some(Position::CreatedAt { at, id }) => {
            binds.extend([":after_at", ":after_id"]);
            defines.push(("after_at".to_owned(), at.to_rfc3339()));
            defines.push(("after_id".to_owned(), id.to_string()));
        }
        Some(Position::Name { .. }) => return Err("name positions are not a scenario here".into()),
        None => {}
    }
    binds.push(":limit");
    let sql = substitute(builder.sql(), &binds)?;
    Ok(Scenario {
        name: name.to_owned(),
        requests,
        script: format!("\\set w random(1, {})\n{sql};\n", plan.small().len()),
        defines,
        plan_cache_mode: shape.plan_mode(request).setting(),
    })
}

/// The shape the API gives `request`'s search: a walk where the workspace (a nil one is
/// a random small workspace) is below the API's default threshold.
fn search_shape<K>(request: &ListRequest<K>, plan: &Plan) -> SearchShape {
    let contacts = if request.workspace_id.is_nil() {
        plan.small().first().map_or(0, |workspace| workspace.contacts)
    } else {
        plan.workspaces.iter().find(|workspace| workspace.id == request.workspace_id).map_or(u32::MAX, |w| w.contacts)
    };
    SearchShape::choose(request, contacts < WalkSettings::default().below_rows)
}

/// Retrieve by id. The API answers concurrent retrieves together, one statement per
/// batch (`retrieve::lookups`); the baseline is the cheapest statement for one retrieve, a
/// single primary-key probe, so the ratio shows what the batching buys.
fn retrieve(inputs: &Inputs<'_>) -> Result<Scenario> {
    let sql =
        format!("select {} from contacts where workspace_id = $1 and id = $2 and status = 'active'", Contacts::COLUMNS);
    let sql = substitute(
        &sql,
        &["(select workspace_id from bench_contacts where n = :c)", "(select id from bench_contacts where n = :c)"],
    )?;
    let requests = inputs
        .sample
        .iter()
        .map(|record| {
            let id = inputs.plan.record_id(*record);
            (inputs.keys[record.workspace as usize].clone(), format!("/v1/contacts/{id}"))
        })
        .collect();
    Ok(Scenario {
        name: "contacts: retrieve by id, random workspace".to_owned(),
        requests,
        script: format!("\\set c random(1, {})\n{sql};\n", inputs.sample.len()),
        defines: Vec::new(),
        // As the API's pool for key lookups and retrieves (`lectern_api::reads::lazy_pool`).
        plan_cache_mode: PlanMode::Generic.setting(),
    })
}

/// `$1`, `$2`, … of `sql` replaced by `binds[0]`, `binds[1]`, …; every bind must be used.
pub fn substitute(sql: &str, binds: &[&str]) -> Result<String> {
    let mut out = String::with_capacity(sql.len() + 64);
    let mut used = vec![false; binds.len()];
    let mut rest = sql;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let digits: String = rest[at + 1..].chars().take_while(char::is_ascii_digit).collect();
        let number: usize = digits.parse().map_err(|_| format!("a bare $ in {sql}"))?;
        let bind = binds.get(number - 1).ok_or_else(|| format!("${number} has no pgbench value in {sql}"))?;
        used[number - 1] = true;
        out.push_str(bind);
        rest = &rest[at + 1 + digits.len()..];
    }
    out.push_str(rest);
    if used.contains(&false) {
        return Err(format!("the API's statement binds fewer values than expected: {sql}").into());
    }
    Ok(out)
}

/// Eight digits of one contact's tax id in the big workspace: a term with one match.
pub fn rare_term(plan: &Plan) -> String {
    let big = plan.big();
    (big.contacts / 2..big.contacts)
        .map(|index| contact(plan, Record { workspace: 0, entity: Entity::Contact, index }))
        .filter_map(|found| found.tin)
        .map(|tin| tin.chars().filter(char::is_ascii_digit).collect::<String>())
        .find(|digits| digits.len() >= 8)
        .map_or_else(|| "48151623".to_owned(), |digits| digits[digits.len() - 8..].to_owned())
}

/// The lookup tables pgbench draws random workspaces and contacts from.
pub async fn create_lookups(pool: &PgPool, plan: &Plan, sample: &[Record]) -> Result<()> {
    let small: Vec<Uuid> = plan.small().iter().map(|workspace| workspace.id).collect();
    let workspaces: Vec<Uuid> = sample.iter().map(|record| plan.workspaces[record.workspace as usize].id).collect();
    let ids: Vec<Uuid> = sample.iter().map(|record| plan.record_id(*record)).collect();
    for statement in [
        "create table bench_workspaces (n int primary key, workspace_id uuid not null)",
        "create table bench_contacts (n int primary key, workspace_id uuid not null, id uuid not null)",
    ] {
        sqlx::query(statement).execute(pool).await.context(statement)?;
    }
    sqlx::query("insert into bench_workspaces select n, w from unnest($1::uuid[]) with ordinality as u(w, n)")
        .bind(&small)
        .execute(pool)
        .await
        .context("fill bench_workspaces")?;
    sqlx::query(
        "insert into bench_contacts select n, w, id from unnest($1::uuid[], $2::uuid[]) with ordinality as u(w, id, n)",
    )
    .bind(&workspaces)
    .bind(&ids)
    .execute(pool)
    .await
    .context("fill bench_contacts")?;
    sqlx::query("analyze bench_workspaces, bench_contacts").execute(pool).await?;
    Ok(())
}
