/*
 * kernels.h - the trainer's kernel interface: one signature per op.
 *
 * Each op has a CPU reference, `<op>_forward_cpu` / `<op>_backward_cpu` in
 * kernels/cpu/<op>.c (fp32 loops plus OpenMP, built without fast-math and
 * with -ffp-contract=off; matmul is a blocked GEMM with AVX-512 / AVX2+FMA
 * micro-kernels picked at run time, the exponentials are a vectorisable
 * polynomial within 2 ulp of expf).  Bits may differ between a CPU with FMA
 * and one without, never between thread counts or runs.
 * It is the oracle: a CUDA backend adds `<op>_forward_cuda` with identical
 * arguments (device pointers, same shapes, same accumulate/overwrite rules)
 * and is held to the CPU result by a parity test at `atol + rtol*|ref|`.
 * This header therefore uses only C types that CUDA shares and carries an
 * `extern "C"` guard.
 *
 * What it deliberately does not do: allocate, communicate, validate user
 * input or know about the model.  The model (train/) owns every buffer
 * (parameters, gradients, optimizer state and activations are each one
 * allocation plus a table of pointers), checks the configuration once and
 * returns error codes; kernels are `void` and assume shapes that the model
 * already checked (debug builds assert the invariants, e.g. C % NH == 0).
 * The all-reduces that tensor parallelism needs are the caller's; see
 * "Tensor-parallel shards" below.
 *
 * Conventions, the same for every op:
 *  - Arguments go outputs, then inputs and weights, then dimensions, then
 *    scalar hyperparameters.  Every pointer's comment gives its shape.
 *  - Tensors are dense, row-major, last dimension fastest.  B batch, T
 *    sequence, C channels, OC output channels, V vocabulary, NH heads; hs
 *    (head size) = C / NH.  N counts elements of a flat tensor.
 *  - Backward functions ADD (+=) into every gradient they produce, weights
 *    and inputs alike (llm.c's rule): the caller zeroes gradients once per
 *    step, and a tensor used twice (the tied word embedding, a residual
 *    stream) simply receives both contributions.  The one exception is
 *    crossentropy_backward_cpu, which overwrites dlogits and may run in place
 *    over the logits.
 *  - Output and input pointers do not alias unless a comment allows it.
 *  - Deterministic: no atomics, every reduction runs in a fixed order that
 *    does not depend on the number of OpenMP threads, so results are bitwise
 *    identical from run to run and for any OMP_NUM_THREADS.
 *  - Thread safety: each call uses OpenMP internally; calls on disjoint
 *    buffers may run concurrently.
 *
 * Tensor-parallel shards (Megatron-LM's tensor parallelism; docs/architecture.md,
 * "mdstrain in parallel").  Every op is written
 * for one rank's shard; with TP=1 the shard is the whole tensor.
 *  - Column-parallel linear (QKV, FC1, output layer): `weight` is the rank's
 *    block of OC/tp output rows, `bias` its OC/tp slice; matmul_forward_cpu
 *    is called with OC = OC/tp.  Its dinp is a partial sum to all-reduce
 *    over TP (Megatron's `f` in backward).
 *  - Row-parallel linear (attention projection, FC2): `inp` is the local
 *    (B, T, C/tp) activation, `weight` the rank's (OC, C/tp) column block;
 *    `out` is a partial sum to all-reduce (Megatron's `g`).  The bias is
 *    added once, after the reduce: pass bias = NULL (dbias = NULL) on every
 *    rank and add it afterwards, or pass it on rank 0 only.
 *  - Attention is local to the rank's NH/tp heads: pass C = C/tp and
 *    NH = NH/tp; hs and the scale 1/sqrt(hs) are unchanged.  The fused qkv
 *    row of a token is [q | k | v], each NH*hs wide, head h at h*hs in each
 *    (llm.c's order, over the LOCAL heads), so a rank's column-parallel QKV
 *    output feeds it directly.  Mapping Megatron's per-head interleaved
 *    checkpoint layout onto this is the checkpoint code's job.
 *  - Vocab-parallel embedding and cross-entropy: the rank owns vocabulary
 *    rows [v_start, v_start + V) of the (padded) vocabulary; see encoder_*
 *    and crossentropy_* for the protocol.
 *  - LayerNorm, GELU, residual and AdamW are elementwise or per-row and
 *    apply unchanged to whatever slice a rank holds.
 */
#ifndef MDS_KERNELS_H
#define MDS_KERNELS_H

#include <stddef.h>

#include "dropout.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- encoder: token + learned absolute position embedding -------------- */

/*
 * out[b,t,:] = wte[inp[b,t] - v_start, :] + wpe[t, :].
 *
 * Vocab-parallel (Megatron's VocabParallelEmbedding): a token outside
 * [v_start, v_start + V) contributes a zero row, so summing `out` over the
 * TP ranks gives the full embedding.  Pass wpe on exactly one rank (NULL on
 * the others; NULL means "no position term"): then the all-reduce yields
 * token + position and, since only one rank holds a nonzero token row, is
 * bitwise equal to the TP=1 result.  Token ids must be >= 0; t < maxT is
 * the caller's (T <= max position embeddings).
 */
void encoder_forward_cpu(float *out,       // (B, T, C)
                         const int *inp,   // (B, T) token ids
                         const float *wte, // (V, C) this rank's vocabulary rows
                         const float *wpe, // (maxT, C), first T rows used; or NULL
                         int B, int T, int C, int V, int v_start);

/*
 * dwte[inp - v_start] += dout for the rank's tokens; dwpe[t] += sum_b dout[b,t]
 * (either may be NULL: the embedding LayerNorm sends different gradients to
 * the two).  Rows are summed in (b, t) order, without atomics.
 * Under TP every rank passes dwpe: wpe is replicated and, the forward
 * all-reduce being the identity in backward, every rank sees the same dout.
 */
void encoder_backward_cpu(float *dwte,        // (V, C); or NULL
                          float *dwpe,        // (maxT, C), first T rows; or NULL
                          const float *dout,  // (B, T, C)
                          const int *inp,     // (B, T)
                          int B, int T, int C, int V, int v_start);

/* ---- layernorm ---------------------------------------------------------- */

/*
 * out = (inp - mean) * rstd * weight + bias over the last dimension, with
 * rstd = 1 / sqrt(var + eps) and the biased variance, like torch's LayerNorm
 * (Megatron's --norm-epsilon, default 1e-5).  mean and rstd are saved for
 * the backward.  Statistics accumulate in double.
 */
void layernorm_forward_cpu(float *out,          // (B, T, C)
                           float *mean,         // (B, T)
                           float *rstd,         // (B, T)
                           const float *inp,    // (B, T, C)
                           const float *weight, // (C)
                           const float *bias,   // (C)
                           int B, int T, int C, float eps);

void layernorm_backward_cpu(float *dinp,          // (B, T, C)
                            float *dweight,       // (C)
                            float *dbias,         // (C)
                            const float *dout,    // (B, T, C)
                            const float *inp,     // (B, T, C)
                            const float *weight,  // (C)
                            const float *mean,    // (B, T)
                            const float *rstd,    // (B, T)
                            int B, int T, int C);

/* ---- matmul: linear layer ----------------------------------------------- */

/*
 * out = inp @ weight^T + bias, with weight stored (OC, C) as in Megatron and
 * torch.nn.Linear.  bias may be NULL.  See "Tensor-parallel shards" for
 * column- and row-parallel use.  Each output is ONE fp32 accumulator run
 * over c = 0, 1, ..., C-1 in order (a fused multiply-add per term on CPUs
 * with FMA, a multiply then an add on the portable path), then + bias.
 * The backward's dinp and dweight continue from their current values, over
 * o in order and over the rows (b, t) in order respectively; dbias sums the
 * rows in order in double.  The tiling, the packing and the thread that
 * computes an output never enter that order, so results do not depend on
 * the thread count, and a column-parallel shard equals its slice of the
 * TP=1 result bitwise.
 */
void matmul_forward_cpu(float *out,          // (B, T, OC)
                        const float *inp,    // (B, T, C)
                        const float *weight, // (OC, C)
                        const float *bias,   // (OC) or NULL
                        int B, int T, int C, int OC);

void matmul_backward_cpu(float *dinp,         // (B, T, C)
                         float *dweight,      // (OC, C)
                         float *dbias,        // (OC) or NULL
                         const float *dout,   // (B, T, OC)
                         const float *inp,    // (B, T, C)
                         const float *weight, // (OC, C)
                         int B, int T, int C, int OC);

/* ---- attention: causal multi-head self-attention core -------------------- */

/*
 * From the fused projection qkv, per token [q | k | v] with q NH*hs wide and
 * k, v NKV*hs wide each (NKV key/value heads: NKV == NH is multi-head
 * attention, NKV < NH grouped-query attention with NH/NKV consecutive query
 * heads per key/value head, as Megatron's query groups; NKV divides NH):
 *   out[b,t,h*hs:(h+1)*hs] = sum_{s<=t} softmax_s(q_t . k_s / sqrt(hs)) v_s
 * with k, v those of head h's group g = h / (NH/NKV).  Only the row
 * log-sum-exp of the scaled scores is saved (lse, as flash attention does),
 * not the (T, T) probabilities: the backward recomputes them, so activation
 * memory stays O(T).  Attention dropout (Megatron's --attention-dropout) on
 * the probabilities when drop.p > 0: probability (t, s) of head h is kept,
 * times 1/(1-p), as dropout.h decides for element ((head0 + h) T + t) T + s
 * of row b (lse is the softmax's, before dropout); the backward redraws the
 * same mask.  drop.p = 0 is exactly the computation without it.  Dot products over
 * the head dimension run in order; the softmax sum is in double (16
 * interleaved partial sums over the keys, combined in order).  C and NH are
 * the rank's local query width and heads (C = NH * hs), NKV its local
 * key/value heads.  The backward's dk and dv of a group sum over the
 * group's query heads in order.
 */
void attention_forward_cpu(float *out,       // (B, T, C)
                           float *lse,       // (B, NH, T)
                           const float *qkv, // (B, T, C + 2*NKV*hs)
                           int B, int T, int C, int NH, int NKV, mds_dropout drop);

void attention_backward_cpu(float *dqkv,       // (B, T, C + 2*NKV*hs)
                            const float *dout, // (B, T, C)
                            const float *qkv,  // (B, T, C + 2*NKV*hs)
                            const float *out,  // (B, T, C)   forward output
                            const float *lse,  // (B, NH, T)  forward lse
                            int B, int T, int C, int NH, int NKV, mds_dropout drop);

/* ---- dropout: hidden-state dropout (Megatron's --hidden-dropout) ---------- */

/*
 * out = inp * 1/(1-p) where kept, 0 where dropped, the mask of dropout.h for
 * element (drop.t0 + t)*C + c of row b (C is the GLOBAL hidden width: hidden
 * states are replicated over tensor-parallel ranks, which therefore draw one
 * mask; a sequence-parallel slice of T tokens passes its first global token
 * as t0).
 * out may alias inp.  The backward writes dinp = dout * the same factor
 * (overwrites; may alias).  drop.p must be > 0 (the model skips the call
 * otherwise).
 */
void dropout_forward_cpu(float *out,        // (B, T, C)
                         const float *inp,  // (B, T, C)
                         int B, int T, int C, mds_dropout drop);

void dropout_backward_cpu(float *dinp,       // (B, T, C)
                          const float *dout, // (B, T, C)
                          int B, int T, int C, mds_dropout drop);

/* ---- rope: rotary position embeddings (Megatron's RotaryEmbedding) -------- */

/*
 * The cos and sin tables of positions 0..T-1 for rotary dimension rot (even,
 * <= hs): with inv_freq[i] = 1 / base^((2i) / rot) in float (Megatron's
 * `1.0 / (rotary_base ** (arange(0, dim, 2) / dim))`; with llama3 rope
 * scaling (factor > 0) adjusted as Megatron's _apply_scaling with
 * low/high frequency factors 1 and 4 and an original context of 8192),
 * freq[t, i] = t * inv_freq[i] (float), cos/sin of it.  A host function
 * (the model uploads the tables once).
 */
void rope_tables(float *cos_t,   // (T, rot/2)
                 float *sin_t,   // (T, rot/2)
                 int T, int rot, double base, double llama3_factor);

/*
 * In place over the q heads (NH) and k heads (NKV) of every token of qkv
 * (layout of attention_forward_cpu; v is untouched): the first rot channels
 * of each head rotate by position t.  Not interleaved (Megatron's default,
 * rotate_half): channel i and i + rot/2 (i < rot/2) form a pair;
 * interleaved: channels 2i and 2i+1.  A pair (x, y) with angle a becomes
 * (x cos a - y sin a, y cos a + x sin a); channels from rot on pass through.
 * rope_backward_cpu applies the inverse rotation to dqkv in place: the
 * rotation is orthogonal, so that is the gradient with respect to the
 * unrotated q and k (unlike the other backwards it does not accumulate).
 */
void rope_forward_cpu(float *qkv,          // (B, T, (NH + 2*NKV)*hs)
                      const float *cos_t,  // (T, rot/2)
                      const float *sin_t,  // (T, rot/2)
                      int B, int T, int NH, int NKV, int hs, int rot, int interleaved);

void rope_backward_cpu(float *dqkv,        // (B, T, (NH + 2*NKV)*hs)
                       const float *cos_t, // (T, rot/2)
                       const float *sin_t, // (T, rot/2)
                       int B, int T, int NH, int NKV, int hs, int rot, int interleaved);

/* ---- rmsnorm ------------------------------------------------------------- */

/*
 * out = inp * rstd * weight with rstd = 1 / sqrt(mean(inp^2) + eps) over the
 * last dimension (Megatron's --normalization RMSNorm; no bias).  rstd is
 * saved for the backward; the statistic accumulates in double.
 */
void rmsnorm_forward_cpu(float *out,          // (B, T, C)
                         float *rstd,         // (B, T)
                         const float *inp,    // (B, T, C)
                         const float *weight, // (C)
                         int B, int T, int C, float eps);

void rmsnorm_backward_cpu(float *dinp,          // (B, T, C)
                          float *dweight,       // (C)
                          const float *dout,    // (B, T, C)
                          const float *inp,     // (B, T, C)
                          const float *weight,  // (C)
                          const float *rstd,    // (B, T)
                          int B, int T, int C);

/* ---- swiglu --------------------------------------------------------------- */

/*
 * Megatron's gated linear unit with SiLU (--swiglu): each token's row of inp
 * is [gate (F) | up (F)] (FC1's column-parallel output, F the rank's FFN
 * width) and out = silu(gate) * up, silu(x) = x / (1 + exp(-x)).
 */
void swiglu_forward_cpu(float *out,       // (N, F)
                        const float *inp, // (N, 2F)
                        size_t N, int F);

void swiglu_backward_cpu(float *dinp,       // (N, 2F)
                         const float *inp,  // (N, 2F)
                         const float *dout, // (N, F)
                         size_t N, int F);

/* ---- gelu ---------------------------------------------------------------- */

/*
 * GELU, tanh approximation:
 *   out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
 * This is what Megatron computes by default: its fused bias-GELU
 * (megatron/core/fusions/fused_bias_gelu.py, on while bias_activation_fusion
 * is, the default) and Transformer Engine's "gelu" both use the tanh form,
 * with 0.79788456, the same float as sqrt(2/pi).  The exact erf form
 * (F.gelu, taken only with --no-bias-gelu-fusion on the local
 * implementation) is not provided.  inp and out may alias.
 */
void gelu_forward_cpu(float *out,       // (N)
                      const float *inp, // (N)
                      size_t N);

void gelu_backward_cpu(float *dinp,       // (N)
                       const float *inp,  // (N)
                       const float *dout, // (N)
                       size_t N);

/* ---- residual ------------------------------------------------------------ */

/* out = inp1 + inp2 (out may alias either input). */
void residual_forward_cpu(float *out,        // (N)
                          const float *inp1, // (N)
                          const float *inp2, // (N)
                          size_t N);

/* dinp1 += dout; dinp2 += dout. */
void residual_backward_cpu(float *dinp1,      // (N)
                           float *dinp2,      // (N)
                           const float *dout, // (N)
                           size_t N);

/* ---- crossentropy: softmax + negative log-likelihood over the vocabulary -- */

/*
 * Per token, over this rank's logit columns (vocabulary ids
 * [v_start, v_start + V)):
 *   maxes   = max_v logits,
 *   sumexp  = sum_v exp(logits - maxes)                (accumulated in double:
 *             16 interleaved partial sums over v, combined in order),
 *   tlogits = logits[target - v_start] when the target is in the shard, else 0,
 *   losses  = log(sumexp) + maxes - tlogits,  or 0 where mask == 0.
 * Megatron applies the softmax over the whole padded vocabulary (padding
 * columns included), so V here is the padded width (of the shard).
 *
 * With TP=1 (v_start = 0, V = the padded vocabulary) `losses` is the answer
 * and maxes/sumexp feed the backward.  Vocab-parallel (Megatron's
 * _VocabParallelCrossEntropy), each rank calls this on its shard, then:
 *   1. gmax = all-reduce MAX of maxes;
 *   2. crossentropy_rescale_cpu(sumexp, maxes, gmax)   (maxes becomes gmax);
 *   3. all-reduce SUM of sumexp and of tlogits (one rank owns each target);
 *   4. crossentropy_loss_cpu(losses, maxes, sumexp, tlogits, mask).
 * The caller reduces losses to the training loss, Megatron's
 * sum(losses * mask) / sum(mask).  Targets outside the vocabulary (e.g. -1
 * at masked positions) are allowed: they match no column.
 */
void crossentropy_forward_cpu(float *losses,        // (B, T)
                              float *maxes,         // (B, T)
                              float *sumexp,        // (B, T)
                              float *tlogits,       // (B, T)
                              const float *logits,  // (B, T, V)
                              const int *targets,   // (B, T)
                              const float *mask,    // (B, T) or NULL (all ones)
                              int B, int T, int V, int v_start);

/* sumexp *= exp(maxes - gmax); maxes = gmax.  Step 2 above. */
void crossentropy_rescale_cpu(float *sumexp,      // (B, T)
                              float *maxes,       // (B, T)
                              const float *gmax,  // (B, T)
                              int B, int T);

/* losses = log(sumexp) + maxes - tlogits, or 0 where mask == 0.  Step 4. */
void crossentropy_loss_cpu(float *losses,        // (B, T)
                           const float *maxes,   // (B, T)
                           const float *sumexp,  // (B, T)
                           const float *tlogits, // (B, T)
                           const float *mask,    // (B, T) or NULL
                           int B, int T);

/*
 * dlogits = (softmax(logits) - onehot(target)) * dlosses, per token, from the
 * GLOBAL maxes and sumexp (after the reduction when vocab-parallel); the
 * backward needs no communication.  dlosses is d(loss)/d(losses[b,t]):
 * for Megatron's masked mean it is mask / sum(mask), divided further by the
 * number of micro-batches under gradient accumulation.  Rows whose dlosses
 * is 0 are written as zeros.  Unlike every other backward this OVERWRITES
 * dlogits, and dlogits may equal logits (in place, as llm.c's fused
 * classifier does, so the (B, T, V) buffer is not held twice).
 */
void crossentropy_backward_cpu(float *dlogits,       // (B, T, V)
                               const float *logits,  // (B, T, V)
                               const float *maxes,   // (B, T)
                               const float *sumexp,  // (B, T)
                               const int *targets,   // (B, T)
                               const float *dlosses, // (B, T)
                               int B, int T, int V, int v_start);

/* ---- loss: the masked-mean reduction and its gradient ------------------- */

/*
 * out[0] = sum of losses[i], out[1] = sum of mask[i] (mask NULL: N), each a
 * double accumulated in index order (one sum, not blocked: the oracle's
 * order).  losses may be NULL (out[0] = 0): a pipeline stage without the
 * loss still counts the mask.  out is two doubles in the backend's memory.
 * Megatron's micro-batch loss is out[0] / out[1] (losses are 0 where the
 * mask is, crossentropy_forward_cpu makes them so).
 */
void loss_reduce_cpu(double *out,           // (2)
                     const float *losses,   // (N) or NULL
                     const float *mask,     // (N) or NULL
                     size_t N);

/*
 * dlosses = mask * inv, the gradient of inv * sum(mask * losses): with
 * inv = scale / sum(mask) it seeds the backward of Megatron's masked mean
 * (scale = 1 / micro-batches under accumulation).  Overwrites dlosses.
 */
void loss_grad_cpu(float *dlosses,      // (N)
                   const float *mask,   // (N)
                   float inv,
                   size_t N);

/* ---- mixed precision: storage rounding and gradient unscaling ------------- */

/*
 * x[i] = x rounded to dtype (kernels/dtype.h: nearest even, overflow to
 * infinity), in place: what a tensor holds when a GPU stores it in bf16 or
 * fp16.  The CPU backend runs the fp32 kernels and rounds their stored
 * outputs with this, so --bf16/--fp16 on the CPU see the values the GPU
 * would; dtype MDS_F32 leaves x unchanged.
 */
void round_to_cpu(float *x,   // (N)
                  size_t N, int dtype);

/*
 * x *= factor (the loss scale's inverse, Megatron's unscale of the main
 * gradients) in fp32, then *nonfinite = the number of non-finite x (the
 * optimizer's found_inf).  nonfinite is one double in the backend's memory.
 */
void unscale_check_cpu(double *nonfinite,  // (1)
                       float *x,           // (N)
                       size_t N, float factor);

/* ---- adamw ----------------------------------------------------------------- */

/*
 * One AdamW step (Loshchilov & Hutter; torch.optim.AdamW and the apex /
 * Transformer Engine FusedAdam that Megatron runs with adam_w_mode):
 *   g = grads * grad_scale            (grad_scale: the clipping factor, or 1)
 *   m = beta1 m + (1 - beta1) g
 *   v = beta2 v + (1 - beta2) g^2
 *   params -= lr * ( (m / bc1) / (sqrt(v / bc2) + eps) + weight_decay * params )
 * with bc1 = 1 - beta1^t, bc2 = 1 - beta2^t (computed in double), t >= 1 the
 * step number.  Weight decay is decoupled from the gradient; the caller
 * passes weight_decay = 0 for biases and norm weights (Megatron's
 * no-decay group).  Elementwise, so any shard (ZeRO / distributed
 * optimizer) may be updated on its own.
 */
void adamw_update_cpu(float *params,      // (N)
                      float *m,           // (N)
                      float *v,           // (N)
                      const float *grads, // (N)
                      size_t N, int t,
                      float lr, float beta1, float beta2, float eps,
                      float weight_decay, float grad_scale);

/* ---- global norm and clipping --------------------------------------------- */

/*
 * *out = sum of x^2, in double, over a fixed partition of x into blocks
 * summed in order, so the value does not depend on the thread count.  The
 * caller adds the values of its tensors (in a fixed order) and of the
 * model-parallel ranks, counting TP-replicated tensors once, then takes the
 * square root.  This writes (=) rather than accumulates.
 */
void global_norm_squared_cpu(double *out,      // (1)
                             const float *x,   // (N)
                             size_t N);

/*
 * The factor Megatron's clip_grad_norm_ multiplies the gradients by:
 * clip_grad / (norm + 1e-6) when that is below 1, else 1; 1 when
 * clip_grad <= 0 (clipping off).  A host function shared by every backend;
 * pass the result to adamw_update_*'s grad_scale.
 */
float global_norm_clip_scale(float norm, float clip_grad);

#ifdef __cplusplus
}
#endif

#endif /* MDS_KERNELS_H */
