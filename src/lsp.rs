//! `attnc lsp`: a language server over stdio, on `lsp-server` and `lsp-types` (the crates
//! rust-analyzer is built on).
//!
//! Documents are synchronized whole; every open and change checks the file again and
//! publishes the checker's diagnostics. Hover shows the symbolic shape, strides and
//! contiguity of the binding or sub-expression under the cursor, and its sizes where the
//! client configured dims (`initializationOptions: {"dims": {"B": 2, "N": 7}}`, like
//! `--dim`); go-to-definition finds names, dims and functions; completion lists the ops with
//! their PyTorch parameters and the names in scope.

mod document;
mod position;

use crate::check::DimOverride;
use document::Document;
use lsp_server::{Connection, ErrorCode, Message, Notification, Request, Response};
use lsp_types::notification::{
    DidChangeTextDocument, DidCloseTextDocument, DidOpenTextDocument, Notification as _, PublishDiagnostics,
};
use lsp_types::request::{Completion, GotoDefinition, HoverRequest, Request as _};
use lsp_types::{
    CompletionOptions, CompletionParams, CompletionResponse, DidChangeTextDocumentParams,
    DidCloseTextDocumentParams, DidOpenTextDocumentParams, GotoDefinitionParams, GotoDefinitionResponse,
    Hover, HoverContents, HoverParams, HoverProviderCapability, InitializeParams, Location, MarkupContent,
    MarkupKind, OneOf, PublishDiagnosticsParams, ServerCapabilities, TextDocumentSyncCapability,
    TextDocumentSyncKind, Uri,
};
use std::collections::HashMap;
use std::error::Error;

type Result<T> = std::result::Result<T, Box<dyn Error + Send + Sync>>;

/// Serve on stdin and stdout until the client says `exit`; the process's exit code.
pub fn run() -> i32 {
    let (connection, io) = Connection::stdio();
    let served = serve(&connection);
    drop(connection);
    match served.and_then(|()| io.join().map_err(Into::into)) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("error: attnc lsp: {e}");
            1
        }
    }
}

fn capabilities() -> ServerCapabilities {
    ServerCapabilities {
        text_document_sync: Some(TextDocumentSyncCapability::Kind(TextDocumentSyncKind::FULL)),
        hover_provider: Some(HoverProviderCapability::Simple(true)),
        definition_provider: Some(OneOf::Left(true)),
        completion_provider: Some(CompletionOptions {
            trigger_characters: Some(vec![".".to_string()]),
            ..CompletionOptions::default()
        }),
        ..ServerCapabilities::default()
    }
}

fn serve(connection: &Connection) -> Result<()> {
    let init = connection.initialize(serde_json::to_value(capabilities())?)?;
    let init: InitializeParams = serde_json::from_value(init)?;
    let mut server = Server {
        connection,
        dims: configured_dims(init.initialization_options.as_ref()),
        documents: HashMap::new(),
    };
    for message in &connection.receiver {
        match message {
            Message::Request(req) => {
                if connection.handle_shutdown(&req)? {
                    return Ok(());
                }
                server.request(req)?;
            }
            Message::Notification(n) => server.notification(n)?,
            Message::Response(_) => {}
        }
    }
    Ok(())
}

/// `{"dims": {"B": 2}}` as `--dim B=2`; entries that are not positive integers are ignored.
fn configured_dims(options: Option<&serde_json::Value>) -> Vec<DimOverride> {
    let Some(dims) = options.and_then(|o| o.get("dims")).and_then(|d| d.as_object()) else {
        return Vec::new();
    };
    dims.iter()
        .filter_map(|(name, v)| {
            let value = v.as_i64().filter(|v| *v > 0)?;
            Some(DimOverride {
                name: name.clone(),
                value,
            })
        })
        .collect()
}

struct Server<'a> {
    connection: &'a Connection,
    dims: Vec<DimOverride>,
    /// Open documents by URI.
    documents: HashMap<String, Document>,
}

impl Server<'_> {
    /// Answers a request: its result, or an error for a method not handled, parameters that
    /// do not parse (the server goes on either way).
    fn request(&mut self, req: Request) -> Result<()> {
        let response = match self.answer(&req.method, req.params) {
            Ok(result) => Response::new_ok(req.id, result),
            Err((code, message)) => Response::new_err(req.id, code as i32, message),
        };
        self.connection.sender.send(response.into())?;
        Ok(())
    }

    fn answer(
        &self,
        method: &str,
        params: serde_json::Value,
    ) -> std::result::Result<serde_json::Value, (ErrorCode, String)> {
        let invalid = |e: serde_json::Error| (ErrorCode::InvalidParams, format!("`{method}`: {e}"));
        let result = match method {
            HoverRequest::METHOD => {
                let p: HoverParams = serde_json::from_value(params).map_err(invalid)?;
                let at = p.text_document_position_params;
                let hover = self
                    .document(&at.text_document.uri)
                    .and_then(|d| d.hover(at.position));
                serde_json::to_value(hover.map(|(value, range)| Hover {
                    contents: HoverContents::Markup(MarkupContent {
                        kind: MarkupKind::Markdown,
                        value,
                    }),
                    range: Some(range),
                }))
            }
            GotoDefinition::METHOD => {
                let p: GotoDefinitionParams = serde_json::from_value(params).map_err(invalid)?;
                let at = p.text_document_position_params;
                let uri = at.text_document.uri;
                let range = self.document(&uri).and_then(|d| d.definition(at.position));
                serde_json::to_value(
                    range.map(|range| GotoDefinitionResponse::Scalar(Location { uri, range })),
                )
            }
            Completion::METHOD => {
                let p: CompletionParams = serde_json::from_value(params).map_err(invalid)?;
                let at = p.text_document_position;
                let items = self
                    .document(&at.text_document.uri)
                    .map(|d| d.completions(at.position))
                    .unwrap_or_default();
                serde_json::to_value(CompletionResponse::Array(items))
            }
            other => {
                let message = format!("attnc lsp does not handle `{other}`");
                return Err((ErrorCode::MethodNotFound, message));
            }
        };
        result.map_err(|e| (ErrorCode::InternalError, e.to_string()))
    }

    /// Applies a notification; one whose parameters do not parse is ignored (a notification
    /// has no reply to carry an error).
    fn notification(&mut self, n: Notification) -> Result<()> {
        match n.method.as_str() {
            DidOpenTextDocument::METHOD => {
                let Ok(p) = serde_json::from_value::<DidOpenTextDocumentParams>(n.params) else {
                    return Ok(());
                };
                let doc = p.text_document;
                self.update(doc.uri, doc.text, Some(doc.version))
            }
            DidChangeTextDocument::METHOD => {
                let Ok(p) = serde_json::from_value::<DidChangeTextDocumentParams>(n.params) else {
                    return Ok(());
                };
                // Full synchronization: the last change is the whole text.
                match p.content_changes.into_iter().last() {
                    Some(change) => {
                        self.update(p.text_document.uri, change.text, Some(p.text_document.version))
                    }
                    None => Ok(()),
                }
            }
            DidCloseTextDocument::METHOD => {
                let Ok(p) = serde_json::from_value::<DidCloseTextDocumentParams>(n.params) else {
                    return Ok(());
                };
                self.documents.remove(p.text_document.uri.as_str());
                self.publish(p.text_document.uri, Vec::new(), None)
            }
            _ => Ok(()),
        }
    }

    fn document(&self, uri: &Uri) -> Option<&Document> {
        self.documents.get(uri.as_str())
    }

    /// Check the new text and publish its diagnostics.
    fn update(&mut self, uri: Uri, text: String, version: Option<i32>) -> Result<()> {
        let doc = Document::new(text, &self.dims);
        let diagnostics = doc.diagnostics();
        self.documents.insert(uri.as_str().to_string(), doc);
        self.publish(uri, diagnostics, version)
    }

    fn publish(&self, uri: Uri, diagnostics: Vec<lsp_types::Diagnostic>, version: Option<i32>) -> Result<()> {
        let params = PublishDiagnosticsParams {
            uri,
            diagnostics,
            version,
        };
        let n = Notification::new(PublishDiagnostics::METHOD.to_string(), params);
        self.connection.sender.send(n.into())?;
        Ok(())
    }
}
