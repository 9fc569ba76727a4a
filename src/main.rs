//! The `isir` binary: parses the command line and hands it to the library.

use clap::Parser;

#[tokio::main]
async fn main() {
    let cli = isir::cli::Cli::parse();
    let code = match isir::cli::main(cli).await {
        Ok(exit) => exit.code(),
        Err(e) => {
            eprintln!("error: {e:#}");
            isir::cli::Exit::Error.code()
        }
    };
    std::process::exit(code);
}
