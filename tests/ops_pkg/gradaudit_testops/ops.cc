// Three tiny custom ops for gradaudit's tests: a float op with a Python gradient (GaScale), a float
// op with no gradient (GaNoGrad) and a string -> int op (GaStrLen). One file, kept small so that the
// test suite can compile it in a few seconds.
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"

using namespace tensorflow;

static absl::Status SameShape(shape_inference::InferenceContext* c) {
  c->set_output(0, c->input(0));
  return absl::OkStatus();
}

REGISTER_OP("GaScale")
    .Input("x: float")
    .Output("y: float")
    .SetShapeFn(SameShape)
    .Doc("y = 2 * x. Its gradient (2 * dy) is registered in Python by gradaudit_testops.");

REGISTER_OP("GaNoGrad")
    .Input("x: float")
    .Output("y: float")
    .SetShapeFn(SameShape)
    .Doc("y = x * x + 1. No gradient is registered for it anywhere.");

REGISTER_OP("GaStrLen")
    .Input("s: string")
    .Output("n: int32")
    .SetShapeFn(SameShape)
    .Doc("n = byte length of each string.");

template <typename F>
class GaUnaryFloat : public OpKernel {
 public:
  explicit GaUnaryFloat(OpKernelConstruction* ctx) : OpKernel(ctx) {}
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    Tensor* y = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, x.shape(), &y));
    auto in = x.flat<float>();
    auto out = y->flat<float>();
    for (int64_t i = 0; i < in.size(); ++i) out(i) = F()(in(i));
  }
};

struct Scale { float operator()(float v) const { return 2.0f * v; } };
struct Square1 { float operator()(float v) const { return v * v + 1.0f; } };

class GaStrLenOp : public OpKernel {
 public:
  explicit GaStrLenOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}
  void Compute(OpKernelContext* ctx) override {
    const Tensor& s = ctx->input(0);
    Tensor* n = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, s.shape(), &n));
    auto in = s.flat<tstring>();
    auto out = n->flat<int32_t>();
    for (int64_t i = 0; i < in.size(); ++i) out(i) = static_cast<int32_t>(in(i).size());
  }
};

REGISTER_KERNEL_BUILDER(Name("GaScale").Device(DEVICE_CPU), GaUnaryFloat<Scale>);
REGISTER_KERNEL_BUILDER(Name("GaNoGrad").Device(DEVICE_CPU), GaUnaryFloat<Square1>);
REGISTER_KERNEL_BUILDER(Name("GaStrLen").Device(DEVICE_CPU), GaStrLenOp);
