// ArgMax on the GPU: one work-item per (outer, inner) slice along the axis; int64 indices.
// NaN follows onnxruntime's rule (see argmax.c): picked only when it comes first.
// Ties: the first index, or the last with select_last_index.
__kernel void argmax_f32(__global const float* x, ulong xoff, __global long* y, ulong yoff,
                         ulong outer, ulong axis_len, ulong inner, int last) {
  ulong gid = get_global_id(0);
  if (gid >= outer * inner) return;
  ulong o = gid / inner, i = gid % inner;
  __global const float* xs = x + xoff / 4 + o * axis_len * inner + i;
  float best = xs[0];
  long at = 0;
  for (ulong k = 1; k < axis_len; ++k) {
    float v = xs[k * inner];
    int take = last ? v >= best : v > best;
    if (take) { best = v; at = (long)k; }
  }
  y[yoff / 8 + gid] = at;
}
