//! kubectl's protobuf bodies, recorded once (`tests/protobuf/README.md`), decoded by the
//! embedded API server: each must give the object kubectl writes as JSON for the same
//! command (`--dry-run=client -o json`), and the server must create it from protobuf.

use std::path::PathBuf;

use http_body_util::{BodyExt, Full};
use kstage::apiserver::{ApiServer, Config, protobuf};
use serde_json::Value;

fn fixtures() -> PathBuf {
    crate::root().join("tests/protobuf")
}

/// (name, recorded body, expected object), for each `NAME.pb` with its `NAME.json`.
fn recorded() -> Vec<(String, Vec<u8>, Value)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(fixtures()).expect("tests/protobuf") {
        let path = entry.expect("entry").path();
        if path.extension().is_none_or(|e| e != "pb") {
            continue;
        }
        let body = std::fs::read(&path).expect("body");
        let expected = std::fs::read(path.with_extension("json")).expect("expected JSON");
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        out.push((
            name,
            body,
            serde_json::from_slice(&expected).expect("expected is JSON"),
        ));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

#[test]
fn every_recorded_body_decodes_to_what_kubectl_writes_as_json() {
    let recorded = recorded();
    assert!(recorded.len() >= 7, "{} fixtures", recorded.len());
    for (name, body, expected) in recorded {
        let decoded = protobuf::decode(&body).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            decoded,
            expected,
            "{name}: decoded\n{}\nexpected\n{}",
            serde_json::to_string_pretty(&decoded).unwrap_or_default(),
            serde_json::to_string_pretty(&expected).unwrap_or_default()
        );
    }
}

/// POST `body` as protobuf to `path`; the status and the JSON answer.
async fn post(server: &ApiServer, path: &str, body: Vec<u8>) -> (u16, Value) {
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<Full<bytes::Bytes>>();
    let request = http::Request::post(format!("{}{path}", server.url()))
        .header("content-type", protobuf::MEDIA_TYPE)
        .header("accept", "application/json")
        .body(Full::new(bytes::Bytes::from(body)))
        .expect("request");
    let response = client.request(request).await.expect("answer");
    let status = response.status().as_u16();
    assert_eq!(
        response.headers()["content-type"],
        "application/json",
        "answers stay JSON"
    );
    let bytes = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    (status, serde_json::from_slice(&bytes).expect("JSON answer"))
}

#[tokio::test]
async fn the_server_creates_objects_from_protobuf_and_refuses_what_it_cannot_read() {
    let server = ApiServer::start(Config::default()).await.expect("server");
    let body = |name: &str| std::fs::read(fixtures().join(format!("{name}.pb"))).expect("body");
    let (status, created) = post(&server, "/api/v1/namespaces", body("namespace")).await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["metadata"]["name"], "demo");
    assert!(created["metadata"]["uid"].is_string());
    let (status, secret) = post(&server, "/api/v1/namespaces/demo/secrets", body("secret")).await;
    assert_eq!(status, 201, "{secret}");
    assert_eq!(secret["data"]["password"], "czNjcmV0");

    // CustomResourceDefinitions (and custom resources) are not decoded from protobuf here:
    // kube-apiserver's 415 for a body it cannot read.
    let (status, refused) = post(
        &server,
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        body("namespace"),
    )
    .await;
    assert_eq!(status, 415, "{refused}");
    assert_eq!(refused["reason"], "UnsupportedMediaType");
    assert_eq!(
        refused["message"],
        "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml"
    );
    // A body that is not protobuf at all is a 400, as a body that is not JSON is.
    let (status, bad) = post(&server, "/api/v1/namespaces", b"{}".to_vec()).await;
    assert_eq!(status, 400, "{bad}");
}
