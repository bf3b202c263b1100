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
titan-train \- Llama 3 pre-training from token shards, on one process or N MPI ranks
.SH SYNOPSIS
.B titan-train
.B \-\-config
.I FILE
.RI [ \-\-section.key=VALUE ...]
.RB [ \-\-threads
.IR N ]
.RB [ \-\-log\-rank
.IR LIST ]
.br
.B mpiexec \-n
.I N
.B titan-train
.B \-\-config
.I FILE
.RI [ ... ]
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
The first time a rank reads from a shard it checks the shard's payload
CRC32C and its token ids; a corrupt shard stops the run (exit 1) naming the
file, before any of its tokens are trained on.
.PP
It runs on the CPU (OpenBLAS + OpenMP), as one process or as N ranks started
by MPICH's
.B mpiexec
or SLURM's
.B srun \-\-mpi=pmi2
(a process started without a launcher runs alone and needs no MPI).
.SH PARALLELISM
The ranks form torchtitan's mesh, outermost first: pp, dp_replicate,
dp_shard, cp, tp.  The product of the
.B parallelism.*_degree
keys must equal the number of ranks;
.B data_parallel_shard_degree
\-1 takes the ranks left over.  Every combination the mesh allows works;
each reproduces the one-rank losses up to float rounding.
.TP
.B FSDP \fR(data_parallel_shard_degree > 1)
FSDP2's per-parameter sharding: every rank stores rows
[r\(buchunk, (r+1)\(buchunk) of dim 0 of each parameter (chunk =
ceil(rows / N), torch.chunk's split), of its gradient and of its AdamW
moments.  Each unit (the embeddings, each block, the final norm with the
output layer) is all-gathered before its forward, the next unit prefetched
while it computes, freed after forward unless
.B parallelism.fsdp_reshard_after_forward
is never, all-gathered again before its backward, and its gradients are
reduce-scattered after its backward while the next unit's backward runs.
.TP
.B DDP \fR(data_parallel_replicate_degree > 1, shard degree 1)
Every rank holds the whole model; gradients are all-reduced in buckets of
.B comm.bucket_size_mb
(25 by default, torch's bucket_cap_mb) as soon as backward has produced
them, on the last microbatch of a step.
.TP
.B HSDP \fR(both > 1)
FSDP within each replica, then the sharded gradients are all-reduced across
the replicas.
.TP
.B TP \fR(tensor_parallel_degree > 1, composes with all of the above)
torchtitan's Llama plan with sequence parallelism: wq, wk, wv, w1, w3 split
on their output features (each rank computes n_heads/tp heads and
ffn_hidden/tp hidden units), wo and w2 on their input features, the
embedding and the output layer on the vocabulary (torch.chunk's split);
the residual stream and the norms hold seq/tp of the tokens, all-gathered
before attention, the feed-forward and the output layer and
reduce-scattered after wo, w2 and the embedding.  With loss parallelism
(the default) the cross-entropy reduces the row maximum, the sum of
exponentials and the target logit over the TP ranks instead of gathering
the logits
.RB ( parallelism.disable_loss_parallel
gathers them).  tp must divide n_heads, n_kv_heads, the FFN hidden size and
seq_len; FSDP shards each rank's TP slice.
.B enable_async_tensor_parallel
is refused.
.TP
.B PP \fR(pipeline_parallel_degree > 1, composes with TP)
One stage per rank, split as torchtitan: the blocks of
.B parallelism.pipeline_parallel_split_points
(layers.N starts a stage), or
.B pipeline_parallel_layers_per_stage,
or n_layers + 2 units evenly (the embedding counts as a block of the first
stage, norm and output as one of the last; the first stages take the
remainder).  The local batch runs as local_batch_size /
.B pipeline_parallel_microbatch_size
microbatches under
.B pipeline_parallel_schedule
GPipe (every forward, then every backward), 1F1B (stage s runs
pp \- 1 \- s forwards, then one forward and one backward in turn) or
Interleaved1F1B (V stages per rank, loop style: stage s on rank s mod pp;
V = 2 or from
.BR pipeline_parallel_layers_per_stage ;
torch's ScheduleInterleaved1F1B order; the microbatches must be a multiple
of pp) or InterleavedZeroBubble (the same stages; torch's
ScheduleInterleavedZeroBubble, the ZB1P schedule: each backward is split
into an input pass B, whose gradient goes to the previous stage at once,
and a weight pass W that runs later in the bubbles; W adds the same
gradients as the fused backward, so the losses equal Interleaved1F1B's bit
for bit; each microbatch keeps its layers' output gradients, and under
activation checkpointing copies of the recomputed layer inputs, from B to
W; the first stage's B is empty and its W the whole backward, as torch's;
the microbatches M must be a multiple of max(1, M / pp), torch's rounds)
or ZBVZeroBubble (torch's ScheduleZBVZeroBubble, ZB-V: the same split
backward over exactly 2 stages per rank in V style, rank r holding stages r
and 2pp \- 1 \- r, so the last rank passes its first stage's output to its
second without a message; any M);
activations and gradients move by non-blocking MPI point-to-point, every
receive of a step posted at its start.  The loss comes from the last
stage; the gradient norm sums the stages'.  LoopedBFS is refused (exit 2),
as are tied embeddings under PP.  Validation runs the schedule's forwards.
.TP
.B CP \fR(context_parallel_degree > 1)
Each sequence is cut into 2\(mucp chunks and rank r of the CP group holds
chunks r and 2\(mucp \- 1 \- r (torchtitan's causal load balancing) of
every row: norms, linears and the loss run on its tokens, RoPE at their
positions.  Attention, by
.BR context_parallel_rotate_method :
.B allgather
(the default) all-gathers the keys and values of the whole sequence and
reduce-scatters their gradients back;
.B alltoall
is ring attention (PyTorch's ALL_TO_ALL rotation): each rank's keys and
values go around the CP group in cp steps, each step computing the rank's
queries against the block it holds (causal, full or skipped by chunk
position) while the next block travels, the partial results merged by
log-sum-exp; backward sends the key/value gradients around with them, back
to their owner.  Both give the losses of one rank; alltoall holds a few
one-rank blocks during attention instead of the whole sequence's keys,
values and their gradients for the run (docs/performance.md).  seq_len
must divide into
2\(mucp\(mutp pieces.  FSDP shards over dp_shard \(mu cp, as torchtitan.
.PP
Collectives run on a progress thread per communicator, so they overlap
the computation.  Every layout trains on the same sequences as one rank
(each data-parallel rank reads its rows of every global batch) and
reproduces the one-rank losses up to float rounding: the loss is divided by
the step's valid tokens over all ranks and gradients are summed.
Weights are initialised per shard from counter-based random numbers, so
every layout starts from the same weights.
.PP
.B Faults.
Until the end of step 1 every collective waits at most
.B comm.init_timeout_seconds,
then
.BR comm.train_timeout_seconds .
A rank whose collective does not finish in time finds out which ranks no
longer answer, prints the operation, the step and the missing ranks, writes
its flight recorder (the last
.B comm.trace_buf_size
collectives) to
.IR job.dump_folder / comm.save_traces_folder /rank R .json
and exits with status 3.  A failing rank ends the whole job
(MPI_Abort) instead of leaving the others waiting.
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
share of the machine's memory); with training.device cuda it is the peak of
the caching allocator's reserved device memory, torchtitan's max_reserved
(and its share of the device's; metrics.jsonl adds max_active and the
allocation retries and OOMs: docs/memprof.md); tps is tokens per second; mfu uses
FLOPs/token = 6(N \- N_embedding) + 12\(buL\(buH\(buhd\(buS and the peak from
.BR metrics.peak_flops ,
or, when it is null, the nominal peak of the device: on the CPU threads x
clock x FLOPs/cycle of the ISA OpenBLAS's sgemm kernel uses (AVX2 FMA: 2
FMA units x 8 fp32 lanes x 2 = 32; AVX-512: 64; the clock from the model
name, cpufreq or cpu MHz of /proc/cpuinfo: docs/performance.md, "MFU on the
CPU"), on a GPU its bf16 dense peak by name (989e12 for H100/H200).  The
start-up log line names it and how it was found (metrics.jsonl's tflops /
mfu_pct gives it back); the same machine gives the same peak in every run.
.B metrics.measure_peak_flops
measures an sgemm at start-up instead (12 MiB before the model; it moves
between runs).
.PP
The same values, plus
lr, tokens seen, step and data-loading time and the peak memory per tag, go
to
.IR job.dump_folder / metrics.save_jsonl_file
(JSON lines; rank 0 writes it, every rank with
.BR metrics.save_for_all_ranks ).
On several ranks, tps, tflops and mfu are per rank (as torchtitan's),
memory is rank 0's, and metrics.jsonl adds the slowest rank's step time and
the largest rank's peak memory.  With
.BR metrics.enable_tensorboard ,
the same scalars under torchtitan's TensorBoard tags
(loss_metrics/global_avg_loss, grad_norm, lr, throughput(tps), mfu(%),
memory/max_reserved(GiB), ...) go to a TensorBoard event file,
.IR job.dump_folder / metrics.save_tb_folder /YYYYmmdd-HHMM/events.out.tfevents. *
(a folder per run; rank 0, every rank in
.RI rank_ R /
with
.BR metrics.save_for_all_ranks ).
Profiling traces and memory traces are
written per rank
.RI ( rank R _trace.json ,
.IR rank R .memtrace ).
Log lines start with
.RI [rank R ]:
on several ranks.  With
.BR validation.enable ,
the loss over the shards' val split is printed every
.B validation.freq
steps
.RB ( validation.seq_len
and
.B validation.local_batch_size
must be the training ones).  A loss or gradient norm that is not finite
stops the run (exit 1) unless
.B training.skip_nonfinite
is set.
.PP
Files titan-train creates under fixed names in
.B job.dump_folder
(metrics.jsonl, .titan-train.lock, the memory traces, the flight recorder's
files) are never written through a symbolic link: a link at that name is
replaced by a regular file, with a warning, and the file it pointed at is
left alone.  Shards, checkpoints and tokenizers must be regular files: a
FIFO is refused at once (exit 1) rather than waited on.
.PP
The folder keys
.RB ( checkpoint.folder ,
.BR metrics.save_jsonl_file ,
.BR metrics.save_tb_folder ,
.BR profiling.save_traces_folder ,
.BR profiling.save_memory_snapshot_folder ,
.BR comm.save_traces_folder )
are under
.B job.dump_folder
unless absolute: an absolute path is used as it is, as torchtitan's
os.path.join (checkpoint.folder=/shared/ckpt saves to and resumes from
/shared/ckpt, whatever the dump folder).
.PP
The start-up lines describe the run: the first names the device
.B training.device
resolved to ("training.device auto \(-> cpu"); "Parallelism:" names every
dimension above 1 with its degree ("FSDP 2 (dp_shard) x TP 2 x PP 2 (1F1B, 4
microbatches of 1 x 128 tokens)", or "single rank"); "Training starts:" the
microbatches each rank runs per step (a pipeline's when PP is on).  On the
CPU, which computes in float32,
.B training.mixed_precision_param
bfloat16 (the default) is said once; it sets the GEMM precision on CUDA.
.SH CHECKPOINTS
With
.BR checkpoint.enable ,
every
.B checkpoint.interval
steps and at the last step (and when a stop signal arrives) the model,
the AdamW moments, the step, the
tokens seen, the data position and the schedule go to
.IR job.dump_folder / checkpoint.folder /step-N.h5
(HDF5, whole tensors under torchtitan's names whatever the layout: on
several ranks each writes the rows it holds into the one file with parallel
HDF5; written under a temporary name and renamed when complete, so a job
that dies while saving leaves the previous step as the newest); the last
save holds the weights only
(in
.BR checkpoint.export_dtype )
unless
.B checkpoint.last_save_model_only
is false, and only the newest
.B checkpoint.keep_latest_k
steps are kept.  A run resumed from an older step than the folder's newest
.RB ( checkpoint.load_step ,
or a damaged newest step) starts a new lineage: at start, a run that saves
moves the newer steps, of the run it replaces, into
.IR checkpoint.folder /superseded\- YYYYmmdd\-HHMMSS /
with a warning naming them (nothing is deleted), so that
.B checkpoint.keep_latest_k
never deletes this run's own steps in their favour and the next resume
continues this run.  Temporary files of writes that were killed
(step-N.h5.tmp.*) are removed at start, whatever
.BR checkpoint.keep_latest_k .
A run whose folder holds checkpoints resumes from the newest
(or
.BR checkpoint.load_step )
and continues with bit-identical losses (on the same layout; a checkpoint
of any layout resumes on any other, the data position included).  Every
tensor's bytes are checked against the crc32c attribute it was saved with
(on several ranks each rank its rows, combined); a damaged newest step
\(em a checksum mismatch, a truncated file \(em gives way to the complete
step before it, with a warning naming both (an explicit
.B checkpoint.load_step
fails instead);
.B checkpoint.initial_load_path
starts from other weights,
.B checkpoint.create_seed_checkpoint
writes step-0 and exits.  See
.BR titan-ckpt-convert (1)
for HuggingFace export.
.PP
A checkpoint loads only into the model it was saved from: its stored
architecture (dim, n_layers, n_heads, n_kv_heads, ffn hidden size,
vocab_size, tie_word_embeddings, norm_eps, rope_theta, rope scaling) is
compared with the config's before any tensor, and a difference is a
configuration error (exit 2) naming each field with both values
(\(lqstep-100.h5' holds another model than the config's: n_heads 4 there,
8 in the config (model.n_heads)\(rq): 4 heads of 16 and 8 heads of 8 have
the same shapes.
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
CPU threads per rank (default: OMP_NUM_THREADS, else the node's cores
divided by the ranks on the node).
.TP
.BI \-\-log\-rank " LIST"
The ranks that print step lines and info messages: 0 (the default), a
comma-separated list, or all (torchtitan's \-\-local\-ranks\-filter).  The
others print warnings and errors only.  Also TITAN_LOG_RANKS.
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
.B OPENBLAS_CORETYPE
The OpenBLAS kernel of the GEMMs.  Unset, titan-train compares the kernel
OpenBLAS picked with the fastest the CPU flags of /proc/cpuinfo allow
(AVX-512 F, BW, DQ and VL: SkylakeX; AVX2 and FMA: Haswell) and, when
OpenBLAS's is slower (Debian 12's 0.3.21 runs Prescott on new Intel CPUs),
sets it and re-executes itself once, as above; every rank chooses alike.
A value set by the user is kept; when it is slower than the CPU allows,
the log warns once.  The first log line and
.B \-\-version
(gemm:) name the kernel and how it was chosen; the MFU peak is that
kernel's (docs/performance.md, "The BLAS kernel").
.TP
.BR TITAN_LOG_LEVEL ", " TITAN_LOG_TIME
As every titan tool (error, warn, info, debug, trace; 0 drops timestamps).
.SH SIGNALS
SIGTERM (what SLURM sends before the time limit), SIGINT and SIGUSR1 on any
rank make every rank finish the current step; a checkpoint is saved when
.B checkpoint.enable
is set, and the exit status is 128 + the signal number.  A second signal
stops the process at once, removing the checkpoint file being written.
.SH EXIT STATUS
Every titan tool exits with:
.TP
.B 0
success;
.TP
.B 1
a runtime failure: the command was valid but the work failed \(em a data
file (input text, token stream, tokenizer, shard, checkpoint, HF folder,
trace, estimate) is missing, unreadable or malformed, an output cannot be
written (no such folder, no permission, a full disk, a closed pipe), or a
numeric, device or MPI failure;
.TP
.B 2
a usage or configuration error, found before the work starts: an unknown
option, a missing or extra argument, a bad option value, or a
.B \-\-config
file that is missing, not YAML, or holds an unknown key, a value out of
range or settings that cannot be combined.
.PP
Whether a bad file gives 1 or 2 follows from its role: the configuration is
part of the command (2), the data it works on is not (1), as samtools exits
1 on a truncated BAM file and git's fatal errors differ from its usage
errors.  The message names the file and, where it can, the line, offset or
key.
.\" end of the shared exit status
.PP
titan-train exits 0 when all steps ran; a non-finite loss that training.skip_nonfinite
does not absorb and an id outside the vocabulary in a shard (the message
names the step, the shard and the offset) and a shard truncated or
rewritten in place while training reads it (the message names the shard
and the byte offset) are runtime failures (1).  Ranks started with
different configs (an MPMD launch line, per-rank overrides) are a
configuration error (2) on every rank before any work, naming the first
rank and key that differ from rank 0.  It adds
3 when a rank stopped answering (a collective timed out) and 128 + N when
stopped by signal N (after the step and its checkpoint).
.SH EXAMPLES
.nf
titan-tokenize -t tok.tiktoken corpus.jsonl | titan-shard -t tok.tiktoken --out data --val-docs 10
titan-train --config configs/llama3_debug.yaml --training.dataset_path=data \e
            --training.seq_len=256 --training.steps=100
mpiexec \-n 4 titan-train \-\-config configs/llama3_debug.yaml \e
            \-\-training.dataset_path=data    # FSDP 4
mpiexec \-n 4 titan-train \-\-config configs/llama3_debug.yaml \e
            \-\-parallelism.data_parallel_replicate_degree=2  # HSDP 2 x 2
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
