//! The client against the simulator: whole streams, every fault kind, the gate, limits.

mod common;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use isir::sim::{FaultKind, FaultPlan, SimOptions};
use isir::source::gate::{CountingGate, LocalGate};
use isir::source::{ClientOptions, GateError, Note, SourceClient, SourceError};

fn client(url: &str, gate: Arc<dyn isir::source::Gate>) -> SourceClient {
    SourceClient::new(
        ClientOptions {
            url: url.into(),
            connect_timeout: Duration::from_secs(2),
            timeout: Duration::from_secs(2),
            max_body_bytes: 32 * 1024 * 1024,
        },
        gate,
    )
    .unwrap()
}

#[tokio::test]
async fn whole_stream_equals_ground_truth() {
    let (sim, url, _g) = common::sim(12_345, 1000, 3).await;
    let gate = Arc::new(CountingGate::default());
    let c = client(&url, gate.clone());
    let mut after = -1;
    let mut got = Vec::new();
    loop {
        let page = c.fetch_after(after).await.unwrap();
        assert!(page.len() <= 1000);
        match page.last_id() {
            None => break,
            Some(l) => after = l,
        }
        for r in page.records {
            // Every generated detail parses, but the erasures' that the simulator breaks
            // on purpose (the type alone must decide an erasure).
            assert!(
                !matches!(r.detail, Note::Unparsed { .. })
                    || ["636", "637"].contains(&r.action.type_code.as_str()),
                "{:?}",
                r.detail
            );
            got.push(r.action);
        }
    }
    assert_eq!(got, sim.truth_all());
    assert_eq!(got.len(), 12_345);
    // 13 pages (12 full, 1 short) + the empty one.
    assert_eq!(gate.granted.load(Ordering::SeqCst), 14);
    assert_eq!(sim.stats().requests_total, 14);
    assert_eq!(c.last_id().await.unwrap(), sim.head_id().unwrap());
}

#[tokio::test]
async fn strictly_greater_and_page_size() {
    let (sim, url, _g) = common::sim(500, 100, 4).await;
    let c = client(&url, Arc::new(CountingGate::default()));
    let truth = sim.truth_all();
    let p = c.fetch_after(truth[9].id).await.unwrap();
    assert_eq!(p.records[0].action.id, truth[10].id);
    assert_eq!(p.len(), 100);
    let p = c.fetch_after(truth[10].id - 1).await.unwrap();
    assert_eq!(p.records[0].action.id, truth[10].id);
    assert!(
        c.fetch_after(sim.head_id().unwrap())
            .await
            .unwrap()
            .is_empty()
    );
}

async fn expect_fault(kind: FaultKind, check: impl Fn(&SourceError) -> bool) {
    let (sim, url, _g) = common::sim(3000, 1000, 5).await;
    sim.set_faults(FaultPlan::none().at(2, kind));
    let c = client(&url, Arc::new(CountingGate::default()));
    let first = c.fetch_after(-1).await.unwrap();
    let err = c
        .fetch_after(first.last_id().unwrap())
        .await
        .expect_err("faulted request must fail");
    assert!(check(&err), "{kind:?} gave {err:?}");
    assert!(!err.to_string().is_empty());
    // The same request again succeeds and gives the right page.
    let again = c.fetch_after(first.last_id().unwrap()).await.unwrap();
    let truth = sim.truth_after(first.last_id().unwrap(), 1000);
    assert_eq!(again.actions().cloned().collect::<Vec<_>>(), truth);
    assert_eq!(sim.stats().faults_served.get(kind.as_str()), Some(&1));
}

#[tokio::test]
async fn fault_http500_is_retryable() {
    expect_fault(FaultKind::Http500, |e| e.is_retryable()).await;
}
#[tokio::test]
async fn fault_truncated_body_is_retryable() {
    expect_fault(FaultKind::Truncate, |e| {
        e.is_retryable() && e.to_string().contains("truncated")
    })
    .await;
}
#[tokio::test]
async fn fault_reset_is_retryable() {
    expect_fault(FaultKind::Reset, |e| e.is_retryable()).await;
}
#[tokio::test]
async fn fault_slow_times_out_and_is_retryable() {
    expect_fault(FaultKind::Slow, |e| {
        e.is_retryable() && e.to_string().contains("timed out")
    })
    .await;
}
#[tokio::test]
async fn fault_soap_fault_is_a_fault() {
    expect_fault(
        FaultKind::SoapFault,
        |e| matches!(e, SourceError::Fault { code: Some(c), .. } if c == "S:Server"),
    )
    .await;
}
#[tokio::test]
async fn fault_chyba_is_refused() {
    expect_fault(
        FaultKind::Chyba,
        |e| matches!(e, SourceError::Refused { code: Some(c), .. } if c == "WS2"),
    )
    .await;
}
#[tokio::test]
async fn fault_garbage_is_invalid() {
    expect_fault(FaultKind::Garbage, |e| matches!(e, SourceError::Invalid(_))).await;
}

#[tokio::test]
async fn newest_id_faults_too() {
    let (sim, url, _g) = common::sim(100, 1000, 5).await;
    sim.set_faults(
        FaultPlan::none()
            .at(1, FaultKind::Chyba)
            .at(2, FaultKind::Http500),
    );
    let c = client(&url, Arc::new(CountingGate::default()));
    assert!(matches!(
        c.last_id().await,
        Err(SourceError::Refused { .. })
    ));
    assert!(c.last_id().await.unwrap_err().is_retryable());
    assert_eq!(c.last_id().await.unwrap(), sim.head_id().unwrap());
}

#[tokio::test]
async fn the_gate_is_asked_before_every_request() {
    let (sim, url, _g) = common::sim(5000, 1000, 6).await;
    let c = client(&url, Arc::new(LocalGate::new(1000, 2)));
    c.fetch_after(-1).await.unwrap();
    c.last_id().await.unwrap();
    match c.fetch_after(-1).await {
        Err(SourceError::NotGranted(GateError::BudgetExhausted {
            used: 2, limit: 2, ..
        })) => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(
        sim.stats().requests_total,
        2,
        "a refused request is never sent"
    );
}

#[tokio::test]
async fn response_size_limit_is_a_clear_error() {
    let (_sim, url, _g) = common::sim(1000, 1000, 7).await;
    let c = SourceClient::new(
        ClientOptions {
            url,
            connect_timeout: Duration::from_secs(2),
            timeout: Duration::from_secs(5),
            max_body_bytes: 64 * 1024,
        },
        Arc::new(CountingGate::default()),
    )
    .unwrap();
    let e = c.fetch_after(-1).await.unwrap_err();
    assert!(
        matches!(e, SourceError::Invalid(ref m) if m.contains("limit of 65536 bytes")),
        "{e}"
    );
}

#[tokio::test]
async fn usage_limits_answer_chyba() {
    let (sim, url, _g) = isir::sim::spawn(SimOptions {
        actions: 100,
        daily_limit: Some(3),
        per_minute_limit: None,
        ..Default::default()
    })
    .await
    .unwrap();
    let c = client(&url, Arc::new(CountingGate::default()));
    for _ in 0..3 {
        c.fetch_after(-1).await.unwrap();
    }
    match c.fetch_after(-1).await {
        Err(SourceError::Refused {
            code: Some(code),
            text: Some(t),
        }) => {
            assert_eq!(code, "SERVER1");
            assert!(t.contains("denní limit"));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(sim.stats().over_limit, 1);

    let (sim, url, _g) = isir::sim::spawn(SimOptions {
        actions: 100,
        daily_limit: None,
        per_minute_limit: Some(2),
        ..Default::default()
    })
    .await
    .unwrap();
    let c = client(&url, Arc::new(CountingGate::default()));
    c.last_id().await.unwrap();
    c.last_id().await.unwrap();
    assert!(matches!(
        c.last_id().await,
        Err(SourceError::Refused { .. })
    ));
    assert_eq!(sim.stats().over_limit, 1);
}

#[tokio::test]
async fn wsdl_stats_truth_and_bad_requests() {
    let (sim, url, _g) = common::sim(2000, 1000, 8).await;
    let http = reqwest::Client::new();
    let wsdl = http
        .get(format!("{url}?wsdl"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        wsdl.contains("getIsirWsPublicIdData") && wsdl.contains("getIsirWsPublicPosledniIdData")
    );
    // A request the service does not know gets a SOAP Fault, whatever the SOAPAction.
    let r = http
        .post(&url)
        .header("SOAPAction", "urn:whatever")
        .body(r#"<s:Envelope xmlns:s="http://schemas.xmlsoap.org/soap/envelope/"><s:Body><x:nope xmlns:x="urn:x"/></s:Body></s:Envelope>"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 500);
    assert!(r.text().await.unwrap().contains("Fault"));
    // Any prefix works.
    let body = r#"<a:Envelope xmlns:a="http://schemas.xmlsoap.org/soap/envelope/"><a:Body><b:getIsirWsPublicIdDataRequest xmlns:b="http://isirpublicws.cca.cz/types/"><idPodnetu>-1</idPodnetu></b:getIsirWsPublicIdDataRequest></a:Body></a:Envelope>"#;
    let text = http
        .post(&url)
        .body(body)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(
        isir::source::parse::parse_data_response(text.as_bytes(), -1)
            .unwrap()
            .len(),
        1000
    );
    let base = url.replace(isir::sim::SERVICE_PATH, "");
    let stats: serde_json::Value = http
        .get(format!("{base}/_sim/stats"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(stats["requests_total"], 2);
    assert_eq!(stats["by_operation"]["after_id"], 1);
    assert_eq!(stats["wsdl_requests"], 1);
    assert_eq!(stats["actions_published"], 2000);
    let truth: Vec<isir::source::Action> = http
        .get(format!("{base}/_sim/truth?after=-1&limit=5"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(truth, sim.truth_after(-1, 5));
    let log: serde_json::Value = http
        .get(format!("{base}/_sim/requests"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(log.as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn live_rate_appends_actions() {
    let (sim, _url, _g) = isir::sim::spawn(SimOptions {
        actions: 100,
        live_rate: 200.0,
        ..Default::default()
    })
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let n = sim.truth_all().len();
    assert!(n > 120, "{n}");
    let before = sim.truth_after(-1, 100);
    assert_eq!(
        before,
        isir::sim::Simulator::new(SimOptions {
            actions: 100,
            ..Default::default()
        })
        .truth_all()
    );
}

#[tokio::test]
async fn random_faults_at_a_rate() {
    let (sim, url, _g) = common::sim(20_000, 1000, 9).await;
    sim.set_faults(FaultPlan::random(
        0.5,
        vec![FaultKind::Http500, FaultKind::Garbage, FaultKind::Chyba],
        1,
    ));
    let c = client(&url, Arc::new(CountingGate::default()));
    let mut after = -1;
    let mut got = Vec::new();
    let mut failures = 0;
    loop {
        match c.fetch_after(after).await {
            Ok(p) => match p.last_id() {
                None => break,
                Some(l) => {
                    after = l;
                    got.extend(p.records.into_iter().map(|r| r.action));
                }
            },
            Err(_) => failures += 1,
        }
        assert!(failures < 200);
    }
    assert!(failures > 5);
    assert_eq!(got, sim.truth_all());
}
