//! A small MCP server on stdio made with the official Rust SDK: `echo`, `add`, and `read-file`
//! (a file of its own rootfs, so the test sees the server's filesystem view). It runs tokio's
//! multi-threaded runtime, so it has threads from its first instant: it cannot be forked from
//! a germline and is served by spawned copies (docs/sandbox.md, "Spawned copies").

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{ServerCapabilities, ServerConfig};
use rmcp::{tool, tool_handler, tool_router, ServerHandler, ServiceExt};

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
struct EchoArgs {
    /// What to send back.
    message: String,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
struct AddArgs {
    a: i64,
    b: i64,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
struct ReadArgs {
    /// An absolute path in the server's filesystem.
    path: String,
}

#[derive(Debug, Clone)]
struct Native {
    tool_router: ToolRouter<Self>,
}

#[tool_router]
impl Native {
    fn new() -> Self {
        Self {
            tool_router: Self::tool_router(),
        }
    }

    #[tool(description = "Echoes the message back")]
    async fn echo(&self, Parameters(EchoArgs { message }): Parameters<EchoArgs>) -> String {
        format!("Echo: {message}")
    }

    #[tool(description = "Adds two integers")]
    async fn add(
        &self,
        Parameters(AddArgs { a, b }): Parameters<AddArgs>,
    ) -> Result<String, String> {
        a.checked_add(b)
            .map(|s| format!("{a} + {b} = {s}"))
            .ok_or_else(|| "overflow".to_string())
    }

    #[tool(name = "read-file", description = "Returns the text of a file")]
    async fn read_file(
        &self,
        Parameters(ReadArgs { path }): Parameters<ReadArgs>,
    ) -> Result<String, String> {
        std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Native {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let service = Native::new().serve(rmcp::transport::stdio()).await?;
    service.waiting().await?;
    Ok(())
}
