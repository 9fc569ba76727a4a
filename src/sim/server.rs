//! The simulator's HTTP face: the SOAP endpoint at the real path, the WSDL at `?wsdl`,
//! and JSON introspection under `/_sim/` (stats, request log, ground truth).
//!
//! Owns request decoding, usage limits and fault production. Dispatches on the local
//! name of the element inside `Body`, never on the SOAPAction header.

use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::extract::{Query, RawQuery, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use quick_xml::events::Event;
use quick_xml::name::ResolveResult;
use quick_xml::reader::NsReader;
use serde::Deserialize;

use super::{FaultKind, LOG_KEEP, RequestLog, SERVICE_PATH, Simulator, prague_today};
use crate::source::parse::{SOAP_ENV_NS, TYPES_NS};
use crate::source::write;

pub fn router(sim: Simulator) -> Router {
    Router::new()
        .route(SERVICE_PATH, get(wsdl).post(soap))
        .route("/_sim/stats", get(stats))
        .route("/_sim/requests", get(requests))
        .route("/_sim/truth", get(truth))
        .with_state(sim)
}

const XML: &str = "text/xml; charset=utf-8";

fn xml(status: StatusCode, body: impl Into<Body>) -> Response {
    let body: Body = body.into();
    (status, [(header::CONTENT_TYPE, XML)], body).into_response()
}

enum Req {
    AfterId(i64),
    LastId,
}

/// Decodes a SOAP request by the local name and namespace of the Body's element.
fn decode(body: &[u8]) -> Result<Req, String> {
    let mut r = NsReader::from_reader(body);
    r.config_mut().expand_empty_elements = true;
    let mut in_body = false;
    loop {
        let (res, ev) = r
            .read_resolved_event()
            .map_err(|e| format!("not well-formed XML: {e}"))?;
        match ev {
            Event::Start(e) => {
                let soap = matches!(res, ResolveResult::Bound(ns) if ns.as_ref() == SOAP_ENV_NS.as_bytes());
                let types =
                    matches!(res, ResolveResult::Bound(ns) if ns.as_ref() == TYPES_NS.as_bytes());
                match e.local_name().as_ref() {
                    b"Envelope" | b"Header" if soap => {}
                    b"Body" if soap => in_body = true,
                    b"getIsirWsPublicIdDataRequest" if in_body && types => {
                        let mut after: Option<i64> = None;
                        loop {
                            match r.read_event().map_err(|e| e.to_string())? {
                                Event::Start(c) if c.local_name().as_ref() == b"idPodnetu" => {
                                    let t = r.read_text(c.name()).map_err(|e| e.to_string())?;
                                    after = Some(t.trim().parse().map_err(|_| {
                                        format!("idPodnetu is not a number: {t:?}")
                                    })?);
                                }
                                Event::End(_) => break,
                                Event::Eof => return Err("unexpected end of request".into()),
                                _ => {}
                            }
                        }
                        return after
                            .map(Req::AfterId)
                            .ok_or_else(|| "idPodnetu missing".to_string());
                    }
                    b"getIsirWsPublicPosledniIdDataRequest" if in_body && types => {
                        return Ok(Req::LastId);
                    }
                    other => {
                        return Err(format!(
                            "unexpected element {}",
                            String::from_utf8_lossy(other)
                        ));
                    }
                }
            }
            Event::Eof => return Err("no operation in the request".into()),
            _ => {}
        }
    }
}

async fn soap(State(sim): State<Simulator>, body: Bytes) -> Response {
    let req = decode(&body);
    let inner = &sim.inner;
    let (n, over) = {
        let mut c = inner.counters.lock().unwrap();
        let today = prague_today();
        if c.day != today {
            c.day = today;
            c.stats.requests_today = 0;
        }
        c.stats.requests_total += 1;
        c.stats.requests_today += 1;
        let op = match &req {
            Ok(Req::AfterId(_)) => "after_id",
            Ok(Req::LastId) => "last_id",
            Err(_) => "invalid",
        };
        *c.stats.by_operation.entry(op.to_string()).or_default() += 1;
        let now = Instant::now();
        while c
            .minute
            .front()
            .is_some_and(|t| now.duration_since(*t).as_secs() >= 60)
        {
            c.minute.pop_front();
        }
        c.minute.push_back(now);
        let over_day = inner
            .opts
            .daily_limit
            .is_some_and(|l| c.stats.requests_today > l);
        let over_min = inner
            .opts
            .per_minute_limit
            .is_some_and(|l| c.minute.len() as u64 > l);
        if over_day || over_min {
            c.stats.over_limit += 1;
        }
        (
            c.stats.requests_total,
            if over_day {
                Some(true)
            } else if over_min {
                Some(false)
            } else {
                None
            },
        )
    };
    let log = |outcome: String, records: usize, last_id: Option<i64>| {
        let mut c = inner.counters.lock().unwrap();
        let (operation, after) = match &req {
            Ok(Req::AfterId(a)) => ("after_id", Some(*a)),
            Ok(Req::LastId) => ("last_id", None),
            Err(_) => ("invalid", None),
        };
        c.log.push_back(RequestLog {
            n,
            operation: operation.into(),
            after,
            outcome,
            records,
            last_id,
        });
        if c.log.len() > LOG_KEEP {
            c.log.pop_front();
        }
    };
    let last_id_op = matches!(req, Ok(Req::LastId));
    if let Some(daily) = over {
        log("over_limit".into(), 0, None);
        let text = if daily {
            "Překročen denní limit požadavků"
        } else {
            "Překročen minutový limit požadavků"
        };
        return xml(
            StatusCode::OK,
            write::chyba_response(last_id_op, "SERVER1", text),
        );
    }
    let req = match &req {
        Ok(r) => r,
        Err(e) => {
            log("client_fault".into(), 0, None);
            return xml(
                StatusCode::INTERNAL_SERVER_ERROR,
                write::fault_response("S:Client", e),
            );
        }
    };
    if !inner.opts.latency.is_zero() {
        tokio::time::sleep(inner.opts.latency).await;
    }
    let fault = inner.faults.lock().unwrap().decide(n);
    if let Some(k) = fault {
        *inner
            .counters
            .lock()
            .unwrap()
            .stats
            .faults_served
            .entry(k.as_str().to_string())
            .or_default() += 1;
    }
    let (answer, records, last) = match req {
        Req::AfterId(after) => {
            let (first, page) = sim.page_after(*after, inner.opts.page);
            let last = page.last().map(|a| a.id);
            let body = {
                let plan = inner.faults.lock().unwrap();
                if plan.records.is_empty() {
                    write::data_response(&page).into_bytes()
                } else {
                    let (body, sent) =
                        super::spoil::render_page(&page, first, |i| plan.defect_at(i));
                    inner.spoiled_sent.lock().unwrap().extend(sent);
                    body
                }
            };
            (body, page.len(), last)
        }
        Req::LastId => {
            let head = sim.head_id().unwrap_or(0);
            (write::last_id_response(head).into_bytes(), 0, Some(head))
        }
    };
    match fault {
        None => {
            log("ok".into(), records, last);
            xml(StatusCode::OK, answer)
        }
        Some(k) => {
            log(format!("fault:{}", k.as_str()), 0, None);
            produce_fault(&sim, k, last_id_op, answer).await
        }
    }
}

async fn produce_fault(
    sim: &Simulator,
    k: FaultKind,
    last_id_op: bool,
    answer: Vec<u8>,
) -> Response {
    match k {
        FaultKind::Http500 => (
            StatusCode::INTERNAL_SERVER_ERROR,
            [(header::CONTENT_TYPE, "text/html")],
            "<html><body><h1>500 Internal Server Error</h1></body></html>",
        )
            .into_response(),
        FaultKind::Truncate => {
            // Cut at a character boundary (before any byte of a UTF-8 sequence's tail).
            let mut cut = answer.len() / 2;
            while cut > 0 && answer[cut] & 0xc0 == 0x80 {
                cut -= 1;
            }
            xml(StatusCode::OK, answer[..cut].to_vec())
        }
        FaultKind::SoapFault => xml(
            StatusCode::INTERNAL_SERVER_ERROR,
            write::fault_response("S:Server", "Internal error"),
        ),
        FaultKind::Chyba => xml(
            StatusCode::OK,
            write::chyba_response(last_id_op, "WS2", "Chyba při zpracování požadavku"),
        ),
        FaultKind::Garbage => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, XML)],
            Bytes::from_static(b"\x00\x1f\x8bgarbage \xff\xfe not xml at all }{"),
        )
            .into_response(),
        FaultKind::Slow => {
            tokio::time::sleep(sim.inner.opts.slow).await;
            xml(StatusCode::OK, answer)
        }
        FaultKind::Reset => {
            let stream = futures::stream::once(async {
                Err::<Bytes, std::io::Error>(std::io::Error::new(
                    std::io::ErrorKind::ConnectionReset,
                    "simulated reset",
                ))
            });
            Response::builder()
                .status(StatusCode::OK)
                .header(header::CONTENT_TYPE, XML)
                .body(Body::from_stream(stream))
                .unwrap()
        }
    }
}

async fn wsdl(State(sim): State<Simulator>, RawQuery(q): RawQuery) -> Response {
    if q.as_deref().is_some_and(|q| q.eq_ignore_ascii_case("wsdl")) {
        sim.inner.counters.lock().unwrap().stats.wsdl_requests += 1;
        xml(StatusCode::OK, WSDL.to_string())
    } else {
        (
            StatusCode::METHOD_NOT_ALLOWED,
            "POST a SOAP request, or GET ?wsdl\n",
        )
            .into_response()
    }
}

async fn stats(State(sim): State<Simulator>) -> Json<super::SimStats> {
    Json(sim.stats())
}

async fn requests(State(sim): State<Simulator>) -> Json<Vec<RequestLog>> {
    Json(sim.requests())
}

#[derive(Deserialize)]
struct TruthQuery {
    after: Option<i64>,
    limit: Option<usize>,
}

async fn truth(State(sim): State<Simulator>, Query(q): Query<TruthQuery>) -> Response {
    let actions = sim.truth_after(
        q.after.unwrap_or(i64::MIN),
        q.limit.unwrap_or(1000).min(100_000),
    );
    Json(actions).into_response()
}

const WSDL: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<definitions xmlns="http://schemas.xmlsoap.org/wsdl/" xmlns:soap="http://schemas.xmlsoap.org/wsdl/soap/"
  xmlns:tns="http://isirpublicws.cca.cz/" xmlns:typ="http://isirpublicws.cca.cz/types/"
  xmlns:xsd="http://www.w3.org/2001/XMLSchema" name="IsirWsPublicService" targetNamespace="http://isirpublicws.cca.cz/">
  <types>
    <xsd:schema targetNamespace="http://isirpublicws.cca.cz/types/" elementFormDefault="unqualified">
      <xsd:element name="getIsirWsPublicIdDataRequest"><xsd:complexType><xsd:sequence>
        <xsd:element name="idPodnetu" type="xsd:long"/></xsd:sequence></xsd:complexType></xsd:element>
      <xsd:element name="getIsirWsPublicPosledniIdDataRequest"><xsd:complexType/></xsd:element>
      <xsd:complexType name="isirWsPublicData"><xsd:sequence>
        <xsd:element name="id" type="xsd:long"/>
        <xsd:element name="datumZalozeniUdalosti" type="xsd:dateTime"/>
        <xsd:element name="datumZverejneniUdalosti" type="xsd:dateTime"/>
        <xsd:element name="dokumentUrl" type="xsd:string" minOccurs="0"/>
        <xsd:element name="spisovaZnacka" type="xsd:string"/>
        <xsd:element name="typUdalosti" type="xsd:string"/>
        <xsd:element name="popisUdalosti" type="xsd:string"/>
        <xsd:element name="oddil" type="xsd:string" minOccurs="0"/>
        <xsd:element name="cisloVOddilu" type="xsd:int" minOccurs="0"/>
        <xsd:element name="poznamka" type="xsd:string" minOccurs="0"/>
      </xsd:sequence></xsd:complexType>
      <xsd:complexType name="isirWsPublicStatus"><xsd:sequence>
        <xsd:element name="stav" type="xsd:string"/>
        <xsd:element name="kodChyby" type="xsd:string" minOccurs="0"/>
        <xsd:element name="popisChyby" type="xsd:string" minOccurs="0"/>
      </xsd:sequence></xsd:complexType>
      <xsd:element name="getIsirWsPublicDataResponse"><xsd:complexType><xsd:sequence>
        <xsd:element name="data" type="typ:isirWsPublicData" minOccurs="0" maxOccurs="unbounded"/>
        <xsd:element name="status" type="typ:isirWsPublicStatus"/></xsd:sequence></xsd:complexType></xsd:element>
      <xsd:element name="getIsirWsPublicPosledniDataResponse"><xsd:complexType><xsd:sequence>
        <xsd:element name="cisloPosledniId" type="xsd:long" minOccurs="0" maxOccurs="unbounded"/>
        <xsd:element name="status" type="typ:isirWsPublicStatus"/></xsd:sequence></xsd:complexType></xsd:element>
    </xsd:schema>
  </types>
  <message name="getIsirWsPublicIdData"><part name="parameters" element="typ:getIsirWsPublicIdDataRequest"/></message>
  <message name="getIsirWsPublicIdDataResponse"><part name="parameters" element="typ:getIsirWsPublicDataResponse"/></message>
  <message name="getIsirWsPublicPosledniIdData"><part name="parameters" element="typ:getIsirWsPublicPosledniIdDataRequest"/></message>
  <message name="getIsirWsPublicPosledniIdDataResponse"><part name="parameters" element="typ:getIsirWsPublicPosledniDataResponse"/></message>
  <portType name="IsirWsPublicPortType">
    <operation name="getIsirWsPublicIdData"><input message="tns:getIsirWsPublicIdData"/><output message="tns:getIsirWsPublicIdDataResponse"/></operation>
    <operation name="getIsirWsPublicPosledniIdData"><input message="tns:getIsirWsPublicPosledniIdData"/><output message="tns:getIsirWsPublicPosledniIdDataResponse"/></operation>
  </portType>
  <binding name="IsirWsPublicPortTypeBinding" type="tns:IsirWsPublicPortType">
    <soap:binding transport="http://schemas.xmlsoap.org/soap/http" style="document"/>
    <operation name="getIsirWsPublicIdData"><soap:operation soapAction=""/><input><soap:body use="literal"/></input><output><soap:body use="literal"/></output></operation>
    <operation name="getIsirWsPublicPosledniIdData"><soap:operation soapAction=""/><input><soap:body use="literal"/></input><output><soap:body use="literal"/></output></operation>
  </binding>
  <service name="IsirWsPublicService">
    <port name="IsirWsPublicPortTypePort" binding="tns:IsirWsPublicPortTypeBinding">
      <soap:address location="https://isir.justice.cz:8443/isir_public_ws/IsirWsPublicService"/>
    </port>
  </service>
</definitions>
"#;
