#!/bin/sh
# mk/gen-man-train.sh TITAN_CONFIG > docs/titan-train.1 — the titan-train man
# page: a fixed head, then the CONFIGURATION section generated from the
# config schema (titan-config --help-config), so every key is documented.
# tests/bats/docs.bats checks that the committed page is up to date.
set -eu
tc=${1:-bin/titan-config}
cat <<'HEAD'
.TH TITAN-TRAIN 1 "2026-11-22" "titan 0.1.0" "titan manual"
.SH NAME
titan-train \- Llama 3 pre-training from token shards (CPU reference path)
.SH SYNOPSIS
.B titan-train
.B \-\-config
.I FILE
.RI [ \-\-section.key=VALUE ...]
.RB [ \-\-threads
.IR N ]
.SH DESCRIPTION
.B titan-train
trains a Llama 3 model (torchtitan's architecture, initialisation, loss,
AdamW, gradient clipping and warmup-stable-decay schedule) on the shards that
.BR titan-shard (1)
wrote to
.BR training.dataset_path .
Each step reads
.B training.global_batch_size
/
.B training.local_batch_size
microbatches of consecutive windows of
.B training.seq_len
+ 1 tokens, normalises the summed cross-entropy by the step's number of
valid tokens, clips the gradients to
.B training.max_norm
(the logged grad_norm is the norm before clipping) and takes an AdamW step.
Activation checkpointing (none, full, or every N-th block) recomputes blocks
in backward and gives bit-identical losses and gradients.
.PP
This version runs one process on the CPU (OpenBLAS + OpenMP); all
parallelism degrees must be 1.
.SH OUTPUT
Every
.B metrics.log_freq
steps (and at step 1 and the last step) torchtitan's log line on standard
output:
.PP
.nf
step: 10  loss:  6.18462  grad_norm:  1.0811  memory:  0.21GiB(0.90%)  tps: 510  tflops: 0.02  mfu: 13.18%
.fi
.PP
memory is the peak of titan's tagged allocator since the last line (and its
share of the machine's memory); tps is tokens per second; mfu uses
FLOPs/token = 6(N \- N_embedding) + 12\(buL\(buH\(buhd\(buS and the peak from
.B metrics.peak_flops
or, when it is null, an sgemm measured at start-up.  The same values, plus
lr, tokens seen, step and data-loading time and the peak memory per tag, go
to
.IR job.dump_folder / metrics.save_jsonl_file
(JSON lines).  With
.BR validation.enable ,
the loss over the shards' val split is printed every
.B validation.freq
steps.  A loss or gradient norm that is not finite stops the run (exit 1)
unless
.B training.skip_nonfinite
is set.
.SH CHECKPOINTS
With
.BR checkpoint.enable ,
every
.B checkpoint.interval
steps and at the last step the model, the AdamW moments, the step, the
tokens seen, the data position and the schedule go to
.IR job.dump_folder / checkpoint.folder /step-N.h5
(HDF5, whole tensors under torchtitan's names; written under a temporary
name and renamed when complete); the last save holds the weights only
(in
.BR checkpoint.export_dtype )
unless
.B checkpoint.last_save_model_only
is false, and only the newest
.B checkpoint.keep_latest_k
steps are kept.  A run whose folder holds checkpoints resumes from the newest
(or
.BR checkpoint.load_step )
and continues with bit-identical losses;
.B checkpoint.initial_load_path
starts from other weights,
.B checkpoint.create_seed_checkpoint
writes step-0 and exits.  See
.BR titan-ckpt-convert (1)
for HuggingFace export.
.SH OPTIONS
.TP
.BR \-c ", " \-\-config " " \fIFILE\fR
The YAML job config.
.TP
.BI \-\- section.key = VALUE
Override a key (see CONFIGURATION).
.TP
.B \-\-help\-config
Print the configuration reference below.
.TP
.BI \-\-threads " N"
CPU threads (default: all cores).
.TP
.BR \-v ", " \-\-verbose ", " \-q ", " \-\-quiet ", " \-h ", " \-\-help ", " \-\-version
As every titan tool.
.SH ENVIRONMENT
.TP
.BR OMP_WAIT_POLICY ", " OPENBLAS_THREAD_TIMEOUT
Unless set, titan-train runs with PASSIVE and 4 (idle OpenMP and OpenBLAS
threads sleep instead of spinning, which on a few cores took the cores the
working threads need); it sets them and re-executes itself once, since both
libraries read them when they load.
.B TITAN_THREAD_DEFAULTS=0
turns this off.
.TP
.BR TITAN_LOG_LEVEL ", " TITAN_LOG_TIME
As every titan tool (error, warn, info, debug, trace; 0 drops timestamps).
.SH EXIT STATUS
0 when all steps ran, 1 on a runtime failure (including a non-finite loss),
2 on a usage error or an invalid configuration.
.SH EXAMPLES
.nf
titan-tokenize -t tok.tiktoken corpus.jsonl | titan-shard -t tok.tiktoken --out data --val-docs 10
titan-train --config configs/llama3_debug.yaml --training.dataset_path=data \e
            --training.seq_len=256 --training.steps=100
.fi
.SH CONFIGURATION
Generated from the config schema
.RB ( "titan-config \-\-help-config" ).
.PP
.nf
HEAD
"$tc" --help-config | sed -e 's/\\/\\e/g' -e 's/^\./\\\&./' -e "s/^'/\\\\\\&'/"
cat <<'TAIL'
.fi
.SH SEE ALSO
.BR titan-config (1),
.BR titan-tokenize (1),
.BR titan-shard (1),
.BR titan-ckpt-convert (1)
TAIL
