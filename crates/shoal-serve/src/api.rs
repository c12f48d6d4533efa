//! The gateway's HTTP routes: the management API (`/functions`,
//! `/instances`, `/metrics`) and invocation (`/fn/NAME/…`).

use super::auth::{self, Guard, Policy};
use super::dispatch::Dispatcher;
use super::error::ApiError;
use super::images::{self, ImageStore};
use super::instance;
use super::spec::{check_name, Backend, DeployRequest, Function, Store};
use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, Request, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use axum::{Json, Router};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// What the routes share.
pub struct App {
    /// Instances and counters.
    pub dispatcher: Arc<Dispatcher>,
    /// The state directory; its mutex also orders deploys, so the file and
    /// the dispatcher always agree.
    pub store: Mutex<Store>,
    /// Uploaded images (`POST /images`).
    pub images: ImageStore,
    /// What deploys may name.
    pub policy: Policy,
}

type Shared = State<Arc<App>>;

/// The router: every route behind the token (see [`auth::require_token`]).
pub fn router(app: Arc<App>, guard: Arc<Guard>) -> Router {
    Router::new()
        .route("/functions", get(list))
        .route("/functions/{name}", get(show).put(deploy).delete(remove))
        .route("/functions/{name}/logs", get(logs))
        .route("/images", axum::routing::post(upload))
        .route("/instances", get(instances))
        .route("/templates", get(templates))
        .route("/metrics", get(metrics))
        .route("/fn/{name}", any(invoke_root))
        .route("/fn/{name}/", any(invoke_root))
        .route("/fn/{name}/{*rest}", any(invoke))
        .fallback(|| async { ApiError::NotFound("no such route: the API has /functions, /images, /instances, /metrics and /fn/NAME/…".into()) })
        .with_state(app)
        .layer(axum::middleware::from_fn_with_state(guard, auth::require_token))
}

async fn list(State(app): Shared) -> Json<Vec<Function>> {
    Json(app.dispatcher.specs())
}

async fn show(State(app): Shared, Path(name): Path<String>) -> Result<Json<Function>, ApiError> {
    check_name(&name)?;
    app.dispatcher.get(&name).map(|f| Json(f.spec.clone())).ok_or_else(|| not_found(&name))
}

fn not_found(name: &str) -> ApiError {
    ApiError::NotFound(format!("no function named {name:?} is deployed"))
}

async fn deploy(State(app): Shared, Path(name): Path<String>, headers: HeaderMap, body: Bytes) -> Result<Response, ApiError> {
    check_name(&name)?;
    content_type(&headers, "application/json", "the settings")?;
    let req: DeployRequest = serde_json::from_slice(&body).map_err(|e| ApiError::BadRequest(format!("the body is not valid deploy settings (JSON): {e}")))?;
    let app2 = app.clone();
    // Checking the image reads it: off the async threads.
    type Deployed = (Function, Option<shoal_spt::Prepared>, Option<instance::BuiltTemplate>, images::RuntimeHold);
    let (f, prepared, template, hold) = tokio::task::spawn_blocking(move || -> Result<Deployed, ApiError> {
        let mode_asked = req.mem_mode.is_some();
        let mut f = Function::from_request(&name, req, &app2.images, &app2.policy)?;
        // A removal meanwhile must not delete the runtime directory this
        // deploy uses (until the dispatcher has the function, below).
        let hold = app2.images.hold_runtime(&f)?;
        if f.mem_mode == "pool" {
            // The pool holds the image's read-only pages from now on (once
            // per library version; a second deploy of it adds nothing).
            match shoal_loader::pool::Pool::default_pool().add(&f.image) {
                Ok(_) => {}
                // Pool mode only by default (a large executable): copy, as
                // `shoal run` falls back.
                Err(_) if !mode_asked => f.mem_mode = "copy".into(),
                Err(e) => return Err(ApiError::Internal(format!("cannot add the image to the library pool: {e}"))),
            }
        }
        // spt: everything an instance's start needs of the image and the
        // settings, checked and made once, here; an image or setting spt
        // cannot run is refused now (422), not at the first invocation.
        // hvt: the same checks its tender makes before it creates a VM.
        let prepared = match f.backend {
            Backend::Spt => Some(instance::prepare(&f).map_err(|e| ApiError::Unprocessable(format!("{e:#}")))?),
            Backend::Hvt => {
                instance::check_hvt(&f).map_err(|e| ApiError::Unprocessable(format!("{e:#}")))?;
                None
            }
            _ => None,
        };
        // spt with `template`: the template booted to its ready point now;
        // a program that ends or crashes before it is refused here.
        let template = match (&prepared, f.template && app2.dispatcher.templates_allowed()) {
            (Some(p), true) => Some(instance::build_template(&f, p).map_err(|e| ApiError::Unprocessable(format!("{e:#}")))?),
            (None, _) if f.backend == Backend::Hvt && f.template => {
                Some(app2.dispatcher.build_hvt_template(&f).map_err(|e| ApiError::Unprocessable(format!("{e:#}")))?)
            }
            _ => None,
        };
        let store = app2.store.lock().unwrap_or_else(|e| e.into_inner());
        let before = app2.dispatcher.specs();
        let mut all: Vec<Function> = before.iter().filter(|o| o.name != f.name).cloned().collect();
        all.push(f.clone());
        all.sort_by(|a, b| a.name.cmp(&b.name));
        store.save(&all).map_err(|e| ApiError::Internal(format!("cannot write the state directory: {e}")))?;
        if let Some(old) = before.iter().find(|o| o.name == f.name) {
            app2.images.forget_unused(old, &all);
        }
        Ok((f, prepared, template, hold))
    })
    .await
    .map_err(|e| ApiError::Internal(format!("the deploy failed: {e}")))??;
    // The same lock as the save, so two deploys land in the order saved.
    let existed = {
        let _store = app.store.lock().unwrap_or_else(|e| e.into_inner());
        let existed = app.dispatcher.put(f.clone(), prepared, template);
        drop(hold);
        existed
    };
    let status = if existed { StatusCode::OK } else { StatusCode::CREATED };
    Ok((status, Json(f)).into_response())
}

async fn remove(State(app): Shared, Path(name): Path<String>) -> Result<Json<Function>, ApiError> {
    check_name(&name)?;
    let app2 = app.clone();
    tokio::task::spawn_blocking(move || -> Result<Json<Function>, ApiError> {
        let store = app2.store.lock().unwrap_or_else(|e| e.into_inner());
        let all: Vec<Function> = app2.dispatcher.specs();
        if !all.iter().any(|f| f.name == name) {
            return Err(not_found(&name));
        }
        let rest: Vec<Function> = all.iter().filter(|f| f.name != name).cloned().collect();
        store.save(&rest).map_err(|e| ApiError::Internal(format!("cannot write the state directory: {e}")))?;
        let removed = app2.dispatcher.remove(&name).ok_or_else(|| not_found(&name))?;
        app2.images.forget_unused(&removed, &rest);
        Ok(Json(removed))
    })
    .await
    .map_err(|e| ApiError::Internal(format!("the removal failed: {e}")))?
}

/// `GET /functions/NAME/logs[?follow=1]`: one JSON object per line
/// (`time`, `instance`, `stream`, `line`); with `follow`, the answer stays
/// open and new lines follow as they are written.
async fn logs(State(app): Shared, Path(name): Path<String>, Query(q): Query<HashMap<String, String>>) -> Result<Response, ApiError> {
    check_name(&name)?;
    let f = app.dispatcher.get(&name).ok_or_else(|| not_found(&name))?;
    let follow = q.get("follow").is_some_and(|v| v != "0" && v != "false");
    let mut text = String::new();
    for l in f.logs.snapshot() {
        text.push_str(&serde_json::to_string(&l).unwrap_or_default());
        text.push('\n');
    }
    let ct = [(header::CONTENT_TYPE, "application/x-ndjson")];
    if !follow {
        return Ok((ct, text).into_response());
    }
    let mut rx = f.logs.feed.subscribe();
    let (tx, body_rx) = tokio::sync::mpsc::channel::<Bytes>(64);
    tokio::spawn(async move {
        if tx.send(Bytes::from(text)).await.is_err() {
            return;
        }
        loop {
            let line = tokio::select! {
                l = rx.recv() => l,
                // The client went away.
                _ = tx.closed() => return,
            };
            match line {
                Ok(l) => {
                    let mut s = serde_json::to_string(&l).unwrap_or_default();
                    s.push('\n');
                    if tx.send(Bytes::from(s)).await.is_err() {
                        return;
                    }
                }
                // A slow follower misses lines rather than holding the gateway up.
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                // The function was removed.
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            }
        }
    });
    Ok((ct, Body::new(ChannelBody(body_rx))).into_response())
}

/// A response body fed through a channel (the log follower).
struct ChannelBody(tokio::sync::mpsc::Receiver<Bytes>);

impl hyper::body::Body for ChannelBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Self::Error>>> {
        self.0.poll_recv(cx).map(|o| o.map(|b| Ok(hyper::body::Frame::data(b))))
    }
}

/// `POST /images`: the request body is an image; it is stored under its
/// SHA-256 and answered with the name a deploy uses (`sha256:HEX`).
async fn upload(State(app): Shared, req: Request<Body>) -> Result<Response, ApiError> {
    content_type(req.headers(), "application/octet-stream", "the image")?;
    let stored = app.images.upload(req.into_body()).await?;
    let status = if stored.created { StatusCode::CREATED } else { StatusCode::OK };
    Ok((status, Json(stored)).into_response())
}

/// 415 unless the body is declared as `want` (parameters aside). A body
/// with no type or a form's type is refused too: a web page can make a
/// browser send those to loopback without asking (`no-cors`), never
/// `application/octet-stream` or `application/json`.
fn content_type(headers: &HeaderMap, want: &str, what: &str) -> Result<(), ApiError> {
    let ct = headers.get(header::CONTENT_TYPE).map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    let ok = ct.as_deref().is_some_and(|c| c.split(';').next().unwrap_or("").trim().eq_ignore_ascii_case(want));
    if ok {
        return Ok(());
    }
    Err(ApiError::UnsupportedMediaType(match ct {
        Some(c) => format!("Content-Type {c}: send {what} as {want}"),
        None => format!("the request has no Content-Type: send {what} as {want}"),
    }))
}

async fn instances(State(app): Shared) -> impl IntoResponse {
    Json(app.dispatcher.instances())
}

async fn templates(State(app): Shared) -> impl IntoResponse {
    Json(app.dispatcher.templates())
}

async fn metrics(State(app): Shared) -> impl IntoResponse {
    let text = app.dispatcher.metrics.render(&app.dispatcher.gauges());
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text)
}

async fn invoke_root(State(app): Shared, Path(name): Path<String>, req: Request<Body>) -> Result<Response, ApiError> {
    let q = req.uri().query().map(|q| format!("/?{q}")).unwrap_or_else(|| "/".into());
    app.dispatcher.invoke(&name, q, req).await
}

async fn invoke(State(app): Shared, Path((name, rest)): Path<(String, String)>, req: Request<Body>) -> Result<Response, ApiError> {
    // The raw path after /fn/NAME, still percent-encoded, as the client sent it.
    let raw = req.uri().path();
    let prefix = format!("/fn/{name}");
    let path = raw.strip_prefix(&prefix).filter(|p| p.starts_with('/')).map(str::to_string).unwrap_or_else(|| format!("/{rest}"));
    let target = match req.uri().query() {
        Some(q) => format!("{path}?{q}"),
        None => path,
    };
    app.dispatcher.invoke(&name, target, req).await
}
