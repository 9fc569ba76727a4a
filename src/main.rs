//! The `isir` binary: parses the command line and hands it to the library.

use clap::Parser;

#[tokio::main]
async fn main() {
    let cli = isir::cli::Cli::parse();
    match isir::cli::main(cli).await {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::exit(1);
        }
    }
}
