//! `hush-host train --task kws …`: central (non-private) training into a model package.

use std::path::PathBuf;

use anyhow::Context;
use hush_host::train::{train_kws, Augment, KwsTrainConfig};

/// What to train.
#[derive(Clone, Copy, clap::ValueEnum)]
pub enum TaskArg {
    /// Keyword spotting (Speech Commands layout).
    Kws,
}

/// Arguments of `hush-host train`.
#[derive(clap::Args)]
pub struct TrainArgs {
    /// Task.
    #[arg(long, value_enum, default_value = "kws")]
    pub task: TaskArg,
    /// Corpus directory.
    #[arg(long)]
    pub data: PathBuf,
    /// Architecture: ds-cnn-s, bc-resnet or leak-cnn.
    #[arg(long, default_value = "ds-cnn-s")]
    pub arch: String,
    /// Keywords, comma-separated (default: yes,no,up,down,left,right,on,off,stop,go);
    /// `_silence_` and `_unknown_` are added.
    #[arg(long, value_delimiter = ',')]
    pub keywords: Vec<String>,
    /// Most epochs (early stopping may end sooner).
    #[arg(long, default_value_t = 30)]
    pub epochs: usize,
    /// Examples per step.
    #[arg(long, default_value_t = 32)]
    pub batch_size: usize,
    /// Peak learning rate (AdamW, warm-up then cosine decay).
    #[arg(long, default_value_t = 3e-3)]
    pub lr: f64,
    /// Epochs without a better validation accuracy before stopping.
    #[arg(long, default_value_t = 8)]
    pub patience: usize,
    /// Mixup Beta(α, α) parameter (0 = off).
    #[arg(long, default_value_t = 0.0)]
    pub mixup: f32,
    /// Turn all augmentation off.
    #[arg(long)]
    pub no_augment: bool,
    /// Seed.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Output model directory.
    #[arg(long)]
    pub out: PathBuf,
}

/// Trains, prints a progress line per epoch and the test report, writes the package.
pub fn run(args: TrainArgs) -> anyhow::Result<()> {
    let TaskArg::Kws = args.task;
    let mut cfg = KwsTrainConfig::new(&args.data, &args.arch);
    if !args.keywords.is_empty() {
        cfg.keywords = args.keywords.clone();
    }
    cfg.epochs = args.epochs;
    cfg.batch_size = args.batch_size;
    cfg.lr = args.lr;
    cfg.patience = args.patience;
    cfg.seed = args.seed;
    cfg.augment = if args.no_augment {
        Augment::none()
    } else {
        Augment {
            mixup_alpha: args.mixup,
            ..Augment::default()
        }
    };
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let epochs = cfg.epochs;
    let report = train_kws(&cfg, &args.out, &command, &mut |e| {
        eprintln!(
            "epoch {:>3}/{epochs}  loss {:.4}  val acc {:.3}  lr {:.2e}{}",
            e.epoch,
            e.train_loss,
            e.val_accuracy,
            e.lr,
            if e.best { "  *" } else { "" }
        );
    })
    .with_context(|| format!("training on {}", args.data.display()))?;
    let card = &report.card;
    println!(
        "{} ({} trainable parameters) → {}",
        card.arch.name(),
        card.num_trainable,
        args.out.display()
    );
    if let Some(m) = card.metrics.as_ref() {
        for (split, s) in &m.splits {
            println!(
                "{split:>10}: {} examples, accuracy {:.3}, balanced keyword accuracy {:.3}",
                s.examples, s.accuracy, s.balanced_keyword_accuracy
            );
        }
        if let Some(t) = m.splits.get("test") {
            println!(
                "test confusion (rows: truth, columns: predicted; {}):",
                card.labels.join(" ")
            );
            for (label, row) in card.labels.iter().zip(&t.confusion) {
                let cells: Vec<String> = row.iter().map(|c| format!("{c:>3}")).collect();
                println!("{label:>10} {}", cells.join(""));
            }
        }
    }
    Ok(())
}
