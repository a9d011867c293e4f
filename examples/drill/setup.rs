//! Setting the drill up: budgetd, the webhook receiver, the chain of services and proxies,
//! publishing topologies, and starting load.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail};
use reqwest::Method;
use serde_json::{json, Value};

use crate::control::{eventually, urls, Api, Budgetd, ChildProc, Receiver};
use crate::counters::Stats;
use crate::load::Load;
use crate::proxy::Fault;
use crate::scenario::{wall_ms, Drill, Options, Plan};
use crate::services::{Role, RoleSpec};
use crate::tally::Checkpoint;

impl Drill {
    pub(crate) async fn setup(plan: Plan, opts: Options) -> anyhow::Result<Self> {
        let t0 = Instant::now();
        if opts.work_dir.join("budgetd-data").exists() {
            bail!(
                "{} holds a previous drill's database: give the drill a new or empty directory",
                opts.work_dir.display()
            );
        }
        std::fs::create_dir_all(opts.work_dir.join("cache"))?;
        let admin = hex::encode(rand::random::<[u8; 24]>());
        let budgetd = tokio::task::block_in_place(|| {
            Budgetd::start(
                &opts.budgetd,
                &opts.work_dir.join("budgetd-data"),
                &opts.work_dir.join("budgetd.log"),
                &admin,
                plan.rollup_ms,
                plan.evaluate_ms,
            )
        })?;
        println!(
            "budgetd: HTTP {} gRPC {} (rollup {} ms, rules every {} ms); logs in {}",
            budgetd.http,
            budgetd.grpc,
            plan.rollup_ms,
            plan.evaluate_ms,
            opts.work_dir.display()
        );
        let api = Api::new(budgetd.base_url(), admin);
        let uploader = api.token("uploader", "drill-uma", "uma").await?;
        let approver = api.token("approver", "drill-abe", "abe").await?;
        let secret = hex::encode(rand::random::<[u8; 16]>());
        let (receiver, url) = Receiver::start(&secret).await?;
        let hook = api
            .ok(
                Method::POST,
                "/webhooks",
                &api.admin,
                Some(&json!({"url": url, "secret": secret})),
            )
            .await?["id"]
            .as_str()
            .ok_or_else(|| anyhow!("no webhook id"))?
            .to_owned();
        let mut drill = Self {
            plan,
            opts,
            budgetd,
            api,
            uploader,
            approver,
            receiver,
            hook,
            children: BTreeMap::new(),
            client: reqwest::Client::builder()
                .timeout(Duration::from_secs(5))
                .pool_max_idle_per_host(512)
                .build()?,
            t0,
            first_traffic_ms: None,
            seq: Arc::default(),
            last: Checkpoint::default(),
            checks: Vec::new(),
        };
        let topology: Value = serde_json::from_str(budget_core::example::CHECKOUT_TOPOLOGY)?;
        let revision = drill.publish(&topology, false).await?;
        drill.start_chain().await?;
        drill.wait_revision(revision).await?;
        println!(
            "chain up: gateway {} → order {} → inventory (via fault proxy) / payment (via fault proxy) / user; budgets at revision {revision} (SPEC §4 run A)",
            drill.children["gateway"].url, drill.children["order"].url
        );
        drill.print_budgets().await?;
        Ok(drill)
    }

    /// Starts the children: leaves, the two fault proxies, order, gateway.
    pub(crate) async fn start_chain(&mut self) -> anyhow::Result<()> {
        let agent_token = async |api: &Api, name: &str| {
            api.token("agent", &format!("drill-{name}"), "drill").await
        };
        let spec = |role: Role, token: String, downstream, upstream| RoleSpec {
            role,
            name: format!("{}-1", role.name()),
            grpc: self.budgetd.grpc_url(),
            token,
            report_window_ms: self.plan.report_window_ms,
            cache: self
                .opts
                .work_dir
                .join(format!("cache/{}.json", role.name())),
            downstream,
            upstream,
        };
        let mut specs = Vec::new();
        for role in [Role::Inventory, Role::Payment, Role::User] {
            specs.push(spec(
                role,
                agent_token(&self.api, role.name()).await?,
                BTreeMap::new(),
                None,
            ));
        }
        let launcher = self.opts.launcher.clone();
        let logs = self.opts.work_dir.clone();
        let spawn = |s: RoleSpec| {
            let launcher = launcher.clone();
            let logs = logs.clone();
            tokio::task::block_in_place(move || launcher.spawn(&s, &logs))
        };
        for s in specs {
            let child = spawn(s)?;
            self.children.insert(child.name.clone(), child);
        }
        for (name, leaf) in [
            ("inventory-proxy", "inventory"),
            ("payment-proxy", "payment"),
        ] {
            let mut s = spec(Role::Proxy, String::new(), BTreeMap::new(), None);
            s.name = name.to_owned();
            s.upstream = Some(self.children[leaf].addr()?);
            let child = spawn(s)?;
            self.children.insert(child.name.clone(), child);
        }
        let order = spec(
            Role::Order,
            agent_token(&self.api, "order").await?,
            urls(&[
                ("inventory", &self.children["inventory-proxy"].url),
                ("payment", &self.children["payment-proxy"].url),
                ("user", &self.children["user"].url),
            ]),
            None,
        );
        let order = spawn(order)?;
        self.children.insert(order.name.clone(), order);
        let gateway = spec(
            Role::Gateway,
            agent_token(&self.api, "gateway").await?,
            urls(&[("order", &self.children["order"].url)]),
            None,
        );
        let gateway = spawn(gateway)?;
        self.children.insert(gateway.name.clone(), gateway);
        Ok(())
    }

    pub(crate) fn services(&self) -> Vec<&ChildProc> {
        ["gateway", "order", "inventory", "payment", "user"]
            .iter()
            .filter_map(|n| self.children.get(*n))
            .collect()
    }

    pub(crate) async fn stats(&self, name: &str, reset: bool) -> anyhow::Result<Stats> {
        let url = format!(
            "{}/stats{}",
            self.children[name].url,
            if reset { "?reset=true" } else { "" }
        );
        Ok(self.client.get(url).send().await?.json().await?)
    }

    pub(crate) async fn fault(&self, proxy: &str, fault: Fault) -> anyhow::Result<()> {
        let url = format!(
            "{}/fault",
            self.children[proxy]
                .control
                .as_deref()
                .ok_or_else(|| anyhow!("{proxy} has no control address"))?
        );
        let r = self.client.post(url).json(&fault).send().await?;
        if !r.status().is_success() {
            bail!("{proxy}: setting {fault:?} answered {}", r.status());
        }
        Ok(())
    }

    /// PUT `topology`, upload run A, get a draft (the upload's, or a recompute when run A
    /// shows no drift), approve it with the second person; returns the revision published.
    /// With `wait`, waits until every agent has applied it.
    pub(crate) async fn publish(&self, topology: &Value, wait: bool) -> anyhow::Result<i64> {
        let api = &self.api;
        api.ok(
            Method::PUT,
            "/chains/checkout/topology",
            &self.uploader,
            Some(topology),
        )
        .await?;
        let run: Value = serde_json::from_str(budget_core::example::CHECKOUT_RUN_A)?;
        let up = api
            .ok(
                Method::POST,
                "/chains/checkout/runs",
                &self.uploader,
                Some(&run),
            )
            .await?;
        let id = match up["baseline_id"].as_str() {
            Some(id) => id.to_owned(),
            None => api
                .ok(
                    Method::POST,
                    "/chains/checkout/baselines",
                    &self.uploader,
                    Some(&json!({"run_id": up["run_id"]})),
                )
                .await?["id"]
                .as_str()
                .ok_or_else(|| anyhow!("no draft id"))?
                .to_owned(),
        };
        let approved = api
            .ok(
                Method::POST,
                &format!("/baselines/{id}/approve"),
                &self.approver,
                Some(&json!({"comment": "drill"})),
            )
            .await?;
        let revision = approved["revision"]
            .as_i64()
            .ok_or_else(|| anyhow!("approving {id} published nothing: {approved}"))?;
        if wait {
            self.wait_revision(revision).await?;
        }
        Ok(revision)
    }

    pub(crate) async fn wait_revision(&self, revision: i64) -> anyhow::Result<()> {
        eventually(
            &format!("every agent applies revision {revision}"),
            Duration::from_secs(15),
            async || {
                for s in self.services() {
                    if self.stats(&s.name, false).await?.revision < revision {
                        return Ok(None);
                    }
                }
                Ok(Some(()))
            },
        )
        .await
    }

    pub(crate) async fn print_budgets(&self) -> anyhow::Result<()> {
        let live = self
            .api
            .ok(
                Method::GET,
                "/chains/checkout/budgets",
                &self.api.admin,
                None,
            )
            .await?;
        let segments = live["segments"].as_array().cloned().unwrap_or_default();
        let line: Vec<String> = segments
            .iter()
            .map(|s| {
                format!(
                    "{} {}/{} ms{}",
                    s["id"].as_str().unwrap_or("?"),
                    s["timeout_ms"],
                    s["budget_ms"],
                    s["stage"]
                        .as_u64()
                        .map(|st| format!(" stage {st}"))
                        .unwrap_or_default()
                )
            })
            .collect();
        println!("  live budgets (timeout/budget): {}", line.join(", "));
        Ok(())
    }

    pub(crate) fn start_load(&mut self, rps: u32) -> Load {
        if self.first_traffic_ms.is_none() {
            self.first_traffic_ms = Some(wall_ms());
        }
        Load::start(
            self.client.clone(),
            format!("{}/checkout", self.children["gateway"].url),
            rps,
            self.plan.keyless_every,
            self.seq.clone(),
            self.t0,
        )
    }

    pub(crate) fn since_start(&self) -> f64 {
        self.t0.elapsed().as_secs_f64()
    }
}
