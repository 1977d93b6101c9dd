// emu: an emulated PrivateUse1 device for profuse's tests and demos.
//
// Tensors live in host memory (the device's allocator is the host's), each kernel really computes on
// that memory, and a Kineto activity profiler registered with REGISTER_PRIVATEUSE1_PROFILER records
// what a real accelerator's runtime would report: runtime calls on the launching thread
// (emuLaunchKernel, emuMemcpyHtoD, emuMemcpyDtoH, emuDeviceSynchronize) and, on the device's streams,
// the kernels and copies they started, linked by correlation ids.
//
// The device runs each launch at once and in order on the launching thread (a synchronous queue):
// the runtime call records the submission, the kernel activity the execution that follows it.
//
// Operators:
//  * allocation, views, resize, copies and .item(): written here against ATen's generic helpers;
//  * the ops RMSNorm and a small transformer block need (kEmuKernels): one kernel each, computed by
//    ATen's CPU kernel on the tensors' own host memory (no copy);
//  * torch.rms_norm: one fused kernel written here;
//  * every other op: the CPU fallback (inputs copied to the host, the CPU kernel, results copied
//    back), counted per op. emu::force_fallback names ops to send there even when emu has a kernel.
#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/core/GeneratorForPrivateuseone.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/record_function.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/alloc_cpu.h>
#include <torch/csrc/profiler/standalone/privateuse1_profiler.h>
#include <torch/library.h>

#include <libkineto.h>
#include <output_base.h>

#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

constexpr c10::DeviceType kEmu = c10::DeviceType::PrivateUse1;
constexpr c10::DeviceIndex kDeviceCount = 1;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

int32_t thread_id() {
  return static_cast<int32_t>(syscall(SYS_gettid));
}

// ---------------------------------------------------------------------------------------------
// Streams: ids per device; the current one per thread. Stream 0 is the default stream.

thread_local c10::DeviceIndex tls_device = 0;
thread_local c10::StreamId tls_stream = 0;
std::atomic<c10::StreamId> g_next_stream{1};

// ---------------------------------------------------------------------------------------------
// What the profiler records while a session runs.

enum class Kind { Runtime, Kernel, Memcpy };

struct Record {
  Kind kind;
  std::string name;
  int64_t start;
  int64_t end;
  int32_t correlation;
  uint64_t external;  // the op (torch's correlation id) that was running, 0 if none
  int32_t thread;
  c10::StreamId stream;
  int64_t bytes;
};

std::atomic<bool> g_recording{false};
std::atomic<int32_t> g_next_correlation{1};
std::mutex g_records_mutex;
std::vector<Record> g_records;
thread_local std::vector<uint64_t> tls_external;

// counters readable from Python whether or not a profiler runs
std::atomic<int64_t> g_kernels{0};
std::atomic<int64_t> g_copies{0};
std::mutex g_fallback_mutex;
std::map<std::string, int64_t> g_fallbacks;
std::set<std::string> g_forced;

void keep(Record r) {
  std::lock_guard<std::mutex> lock(g_records_mutex);
  g_records.push_back(std::move(r));
}

// One submission: the runtime call on this thread (from `call_start`, when the caller began preparing
// it, to the hand-over), then the device's execution of `body` on the current stream, both with one
// correlation id. Ops the body calls inside ATen's CPU kernel are the device's work, not host ops: the
// profiler does not record them.
template <class F>
void submit(const char* call, const std::string& work, Kind kind, int64_t bytes, F&& body, int64_t call_start = 0) {
  const bool on = g_recording.load();
  const int32_t corr = g_next_correlation.fetch_add(1);
  const uint64_t ext = tls_external.empty() ? 0 : tls_external.back();
  const int32_t tid = thread_id();
  const int64_t t0 = on ? (call_start ? call_start : now_ns()) : 0;
  const int64_t t1 = on ? std::max(now_ns(), t0 + 1) : 0;
  if (on) {
    keep({Kind::Runtime, call, t0, t1, corr, ext, tid, tls_stream, 0});
  }
  const int64_t k0 = on ? now_ns() : 0;
  {
    at::RecordFunctionGuard device_work(/*is_enabled=*/false);
    body();
  }
  const int64_t k1 = on ? now_ns() : 0;
  (kind == Kind::Kernel ? g_kernels : g_copies).fetch_add(1);
  if (on) {
    keep({kind, work, std::max(k0, t1), std::max(k1, t1 + 1), corr, ext, tid, tls_stream, bytes});
  }
}

// ---------------------------------------------------------------------------------------------
// Memory: host memory, owned by the device's allocator.

void emu_free(void* ptr) {
  c10::free_cpu(ptr);
}

struct EmuAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
    void* ptr = nbytes ? c10::alloc_cpu(nbytes) : nullptr;
    return {ptr, ptr, &emu_free, c10::Device(kEmu, tls_device)};
  }
  c10::DeleterFnPtr raw_deleter() const override {
    return &emu_free;
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }
};

EmuAllocator g_allocator;
REGISTER_ALLOCATOR(kEmu, &g_allocator);

// ---------------------------------------------------------------------------------------------
// Device guard: one device, streams by id, events that complete at once (execution is in order).

struct EmuGuard final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override {
    return kEmu;
  }
  c10::Device exchangeDevice(c10::Device d) const override {
    auto old = getDevice();
    setDevice(d);
    return old;
  }
  c10::Device getDevice() const override {
    return {kEmu, tls_device};
  }
  void setDevice(c10::Device d) const override {
    TORCH_CHECK(d.type() == kEmu && d.index() < kDeviceCount, "emu: no device ", d);
    tls_device = d.index() < 0 ? 0 : d.index();
  }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    tls_device = d.index() < 0 ? 0 : d.index();
  }
  c10::Stream getStream(c10::Device d) const noexcept override {
    return c10::Stream(c10::Stream::UNSAFE, d, tls_stream);
  }
  c10::Stream getDefaultStream(c10::Device d) const override {
    return c10::Stream(c10::Stream::UNSAFE, d, 0);
  }
  c10::Stream getNewStream(c10::Device d, int priority = 0) const override {
    (void)priority;
    return c10::Stream(c10::Stream::UNSAFE, d, g_next_stream.fetch_add(1));
  }
  c10::Stream exchangeStream(c10::Stream s) const noexcept override {
    auto old = c10::Stream(c10::Stream::UNSAFE, c10::Device(kEmu, tls_device), tls_stream);
    tls_stream = s.id();
    return old;
  }
  c10::DeviceIndex deviceCount() const noexcept override {
    return kDeviceCount;
  }
  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index,
              const c10::EventFlag flag) const override {
    (void)event; (void)stream; (void)device_index; (void)flag;
  }
  void block(void* event, const c10::Stream& stream) const override {
    (void)event; (void)stream;
  }
  bool queryEvent(void* event) const override {
    (void)event;
    return true;
  }
  void destroyEvent(void* event, const c10::DeviceIndex device_index) const noexcept override {
    (void)event; (void)device_index;
  }
  bool queryStream(const c10::Stream& stream) const override {
    (void)stream;
    return true;
  }
  void synchronizeStream(const c10::Stream& stream) const override {
    (void)stream;
  }
  void synchronizeDevice(const c10::DeviceIndex device_index) const override {
    (void)device_index;
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, EmuGuard);

struct EmuHooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const override {
    return true;
  }
  bool isAvailable() const override {
    return true;
  }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex) const override {
    return at::detail::getDefaultCPUGenerator();  // random ops run the CPU kernel on host memory
  }
  at::Device getDeviceFromPtr(void*) const override {
    return {kEmu, 0};
  }
  bool hasPrimaryContext(c10::DeviceIndex) const override {
    return true;
  }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override;
};

EmuHooks g_hooks;

// ---------------------------------------------------------------------------------------------
// Tensors: emu tensors over host memory, and CPU views of the same memory for ATen's CPU kernels.

// Grow (or shrink) a storage in place, keeping its first bytes: every tensor sharing it sees the change.
void resize_storage(c10::StorageImpl* storage, size_t nbytes) {
  if (nbytes == storage->nbytes()) {
    return;
  }
  c10::DataPtr fresh = g_allocator.allocate(nbytes);
  const size_t keep_bytes = std::min(nbytes, storage->nbytes());
  if (keep_bytes) {
    std::memcpy(fresh.get(), storage->data(), keep_bytes);
  }
  storage->set_data_ptr_noswap(std::move(fresh));
  storage->set_nbytes(nbytes);
}

void EmuHooks::resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const {
  resize_storage(storage.unsafeGetStorageImpl(), newsize);
}

// A CPU tensor over an emu tensor's whole storage, same sizes, strides and offset; one CPU storage per
// emu storage (tensors sharing memory still share it). Resizable: a CPU kernel that resizes it gets
// fresh host memory, which `adopt` then hands to the emu storage.
struct HostViews {
  std::unordered_map<c10::StorageImpl*, c10::Storage> by_storage;

  at::Tensor of(const at::Tensor& t) {
    if (!t.defined() || t.device().type() != kEmu) {
      return t;
    }
    c10::StorageImpl* key = t.storage().unsafeGetStorageImpl();
    auto it = by_storage.find(key);
    if (it == by_storage.end()) {
      c10::Storage host(c10::Storage::use_byte_size_t(), key->nbytes(),
                        c10::DataPtr(key->mutable_data(), c10::Device(c10::kCPU)), c10::GetCPUAllocator(),
                        /*resizable=*/true);
      it = by_storage.emplace(key, std::move(host)).first;
    }
    auto view = at::detail::make_tensor<c10::TensorImpl>(c10::Storage(it->second),
                                                         c10::DispatchKeySet(c10::DispatchKey::CPU), t.dtype());
    view.unsafeGetTensorImpl()->set_sizes_and_strides(t.sizes(), t.strides(), t.storage_offset());
    return view;
  }

  // The emu storage a CPU tensor's storage stands for, or null for memory a CPU kernel allocated.
  c10::StorageImpl* emu_storage_of(const at::Tensor& host) const {
    for (const auto& [emu, cpu] : by_storage) {
      if (cpu.unsafeGetStorageImpl() == host.storage().unsafeGetStorageImpl()) {
        return emu;
      }
    }
    return nullptr;
  }
};

// Give `emu` the host memory a CPU storage now holds (a CPU kernel resized it), keeping that alive.
void adopt(c10::StorageImpl* emu, const c10::Storage& host) {
  if (host.data() == emu->data() && host.nbytes() == emu->nbytes()) {
    return;
  }
  auto* owner = new c10::Storage(host);
  c10::DataPtr ptr(host.unsafeGetStorageImpl()->mutable_data(), owner,
                   [](void* ctx) { delete static_cast<c10::Storage*>(ctx); }, c10::Device(kEmu, 0));
  emu->set_data_ptr_noswap(std::move(ptr));
  emu->set_nbytes(host.nbytes());
}

at::Tensor on_storage(c10::Storage storage, const at::Tensor& like) {
  auto t = at::detail::make_tensor<c10::TensorImpl>(std::move(storage), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                                    like.dtype());
  t.unsafeGetTensorImpl()->set_sizes_and_strides(like.sizes(), like.strides(), like.storage_offset());
  return t;
}

// An emu tensor over a CPU result: the result's own memory (no copy), kept alive by the emu storage.
at::Tensor to_emu(const at::Tensor& host, const HostViews& views) {
  if (!host.defined() || host.device().type() != c10::kCPU) {
    return host;
  }
  if (c10::StorageImpl* emu = views.emu_storage_of(host)) {  // a view of an input's memory
    return on_storage(c10::Storage(c10::intrusive_ptr<c10::StorageImpl>::reclaim_copy(emu)), host);
  }
  auto* owner = new c10::Storage(host.storage());
  c10::DataPtr ptr(host.storage().unsafeGetStorageImpl()->mutable_data(), owner,
                   [](void* ctx) { delete static_cast<c10::Storage*>(ctx); }, c10::Device(kEmu, 0));
  c10::Storage storage(c10::Storage::use_byte_size_t(), host.storage().nbytes(), std::move(ptr), &g_allocator,
                       /*resizable=*/true);
  return on_storage(std::move(storage), host);
}

c10::IValue to_host(const c10::IValue& v, HostViews& views) {
  if (v.isTensor()) {
    return views.of(v.toTensor());
  }
  if (v.isTensorList()) {
    c10::List<at::Tensor> out;
    for (const at::Tensor& t : v.toTensorList()) {
      out.push_back(views.of(t));
    }
    return out;
  }
  if (v.isOptionalTensorList()) {
    c10::List<std::optional<at::Tensor>> out;
    for (const std::optional<at::Tensor>& t : v.toOptionalTensorList()) {
      out.push_back(t.has_value() ? std::optional<at::Tensor>(views.of(*t)) : std::nullopt);
    }
    return out;
  }
  return v;
}

c10::IValue from_host(const c10::IValue& v, const HostViews& views) {
  if (v.isTensor()) {
    return to_emu(v.toTensor(), views);
  }
  if (v.isTensorList()) {
    c10::List<at::Tensor> out;
    for (const at::Tensor& t : v.toTensorList()) {
      out.push_back(to_emu(t, views));
    }
    return out;
  }
  return v;
}

std::string kernel_name(const c10::OperatorHandle& op) {
  std::string base = op.schema().name();
  const auto colon = base.find("::");
  if (colon != std::string::npos) {
    base = base.substr(colon + 2);
  }
  while (!base.empty() && base.front() == '_') {
    base.erase(0, 1);
  }
  return "emu_" + base + "_kernel";
}

std::string full_name(const c10::OperatorHandle& op) {
  const auto& name = op.schema().operator_name();
  return name.overload_name.empty() ? name.name : name.name + "." + name.overload_name;
}

// ---------------------------------------------------------------------------------------------
// The CPU fallback: what a device without a kernel for an op does. Counted per op.

void emu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  {
    std::lock_guard<std::mutex> lock(g_fallback_mutex);
    ++g_fallbacks[full_name(op)];
  }
  at::native::cpu_fallback(op, stack);
}

bool forced(const c10::OperatorHandle& op) {
  std::lock_guard<std::mutex> lock(g_fallback_mutex);
  return !g_forced.empty() && (g_forced.count(full_name(op)) || g_forced.count(op.schema().name()));
}

// ---------------------------------------------------------------------------------------------
// One kernel: ATen's CPU kernel run on the inputs' own host memory, launched on the current stream.

void emu_kernel(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
  if (forced(op)) {
    emu_fallback(op, stack);
    return;
  }
  const int64_t call_start = g_recording.load() ? now_ns() : 0;
  const auto& schema = op.schema();
  const size_t n_args = schema.arguments().size();
  const size_t first = stack->size() - n_args;
  std::vector<c10::IValue> originals(stack->begin() + first, stack->end());
  HostViews views;
  for (size_t i = 0; i < n_args; ++i) {
    (*stack)[first + i] = to_host(originals[i], views);
  }
  // the written arguments, to give back their memory if a CPU kernel resized them
  std::vector<std::pair<at::Tensor, at::Tensor>> written;
  for (size_t i = 0; i < n_args; ++i) {
    const auto* alias = schema.arguments()[i].alias_info();
    if (alias && alias->isWrite() && originals[i].isTensor()) {
      written.emplace_back(originals[i].toTensor(), (*stack)[first + i].toTensor());
    }
  }
  submit("emuLaunchKernel", kernel_name(op), Kind::Kernel, 0,
         [&] { op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack); }, call_start);
  for (auto& [emu, host] : written) {
    adopt(emu.storage().unsafeGetStorageImpl(), host.storage());
    emu.unsafeGetTensorImpl()->set_sizes_and_strides(host.sizes(), host.strides(), host.storage_offset());
  }
  const size_t n_ret = schema.returns().size();
  const size_t ret0 = stack->size() - n_ret;
  for (size_t r = 0; r < n_ret; ++r) {
    const auto* alias = schema.returns()[r].alias_info();
    c10::IValue* given = nullptr;
    if (alias && alias->isWrite()) {  // in place or out=: the very argument it wrote
      for (size_t i = 0; i < n_args; ++i) {
        const auto* a = schema.arguments()[i].alias_info();
        if (a && a->isWrite() && a->beforeSets() == alias->beforeSets()) {
          given = &originals[i];
        }
      }
    }
    (*stack)[ret0 + r] = given ? *given : from_host((*stack)[ret0 + r], views);
  }
}

// ---------------------------------------------------------------------------------------------
// torch.rms_norm as one fused kernel: one pass per row for the mean square, one to scale.

template <typename T>
void rms_rows(const T* x, const T* w, T* y, int64_t rows, int64_t cols, double eps) {
  using acc_t = at::opmath_type<T>;
  constexpr int kLanes = 8;  // independent partial sums, so the compiler can vectorise the reduction
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(cols, 1));
  at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* xr = x + r * cols;
      T* yr = y + r * cols;
      acc_t part[kLanes] = {};
      int64_t c = 0;
      for (; c + kLanes <= cols; c += kLanes) {
        for (int k = 0; k < kLanes; ++k) {
          const acc_t v = static_cast<acc_t>(xr[c + k]);
          part[k] += v * v;
        }
      }
      for (; c < cols; ++c) {
        const acc_t v = static_cast<acc_t>(xr[c]);
        part[0] += v * v;
      }
      acc_t total = 0;
      for (int k = 0; k < kLanes; ++k) {
        total += part[k];
      }
      const acc_t inv = acc_t(1) / std::sqrt(total / static_cast<acc_t>(cols) + static_cast<acc_t>(eps));
      if (w) {
        for (c = 0; c < cols; ++c) {
          yr[c] = static_cast<T>(static_cast<acc_t>(xr[c]) * inv * static_cast<acc_t>(w[c]));
        }
      } else {
        for (c = 0; c < cols; ++c) {
          yr[c] = static_cast<T>(static_cast<acc_t>(xr[c]) * inv);
        }
      }
    }
  });
}

at::Tensor emu_rms_norm(const at::Tensor& input, c10::SymIntArrayRef normalized_shape,
                        const std::optional<at::Tensor>& weight, std::optional<double> eps) {
  const auto shape = C10_AS_INTARRAYREF_SLOW(normalized_shape);
  TORCH_CHECK(input.dim() >= static_cast<int64_t>(shape.size()) &&
                  input.sizes().slice(input.dim() - shape.size()).equals(shape),
              "emu rms_norm: normalized_shape ", shape, " does not end the input's shape ", input.sizes());
  const bool has_w = weight.has_value() && weight->defined();
  TORCH_CHECK(!has_w || weight->sizes().equals(shape), "emu rms_norm: weight shape ", weight->sizes(),
              " is not normalized_shape ", shape);
  const at::Tensor x = input.contiguous();
  at::Tensor w;
  if (has_w) {
    w = weight->scalar_type() == input.scalar_type() ? weight->contiguous() : weight->to(input.scalar_type()).contiguous();
  }
  at::Tensor y = at::empty_like(x, at::MemoryFormat::Contiguous);
  int64_t cols = 1;
  for (int64_t s : shape) {
    cols *= s;
  }
  const int64_t rows = cols ? x.numel() / cols : 0;
  // as torch's rms_norm: without eps, the machine epsilon of the input's own type (double's for float64)
  const double e = eps.has_value() ? *eps
                   : x.scalar_type() == at::kDouble ? std::numeric_limits<double>::epsilon()
                                                    : static_cast<double>(std::numeric_limits<float>::epsilon());
  submit("emuLaunchKernel", "emu_fused_rms_norm_kernel", Kind::Kernel, 0, [&] {
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "emu_rms_norm", [&] {
      rms_rows<scalar_t>(x.const_data_ptr<scalar_t>(), has_w ? w.const_data_ptr<scalar_t>() : nullptr,
                         y.mutable_data_ptr<scalar_t>(), rows, cols, e);
    });
  });
  return y;
}

// ---------------------------------------------------------------------------------------------
// Allocation, views, resize, copies, scalars.

at::Tensor emu_empty(c10::SymIntArrayRef size, std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
                     std::optional<at::Device> device, std::optional<bool> pin_memory,
                     std::optional<at::MemoryFormat> memory_format) {
  (void)layout; (void)device; (void)pin_memory;
  return at::detail::empty_generic(C10_AS_INTARRAYREF_SLOW(size), &g_allocator,
                                   c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                   c10::dtype_or_default(dtype), memory_format);
}

at::Tensor emu_empty_strided(c10::SymIntArrayRef size, c10::SymIntArrayRef stride, std::optional<at::ScalarType> dtype,
                             std::optional<at::Layout> layout, std::optional<at::Device> device,
                             std::optional<bool> pin_memory) {
  (void)layout; (void)device; (void)pin_memory;
  return at::detail::empty_strided_generic(C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride),
                                           &g_allocator, c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                           c10::dtype_or_default(dtype));
}

at::Tensor emu_as_strided(const at::Tensor& self, c10::SymIntArrayRef size, c10::SymIntArrayRef stride,
                          std::optional<c10::SymInt> offset) {
  std::optional<int64_t> off;
  if (offset.has_value()) {
    off = offset->expect_int();
  }
  return at::native::as_strided_tensorimpl(self, C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride), off);
}

at::Tensor emu_view(const at::Tensor& self, c10::SymIntArrayRef size) {
  return at::native::view(self, C10_AS_INTARRAYREF_SLOW(size));
}

at::Tensor emu_reshape_alias(const at::Tensor& self, c10::SymIntArrayRef size, c10::SymIntArrayRef stride) {
  return at::native::_reshape_alias(self, C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride));
}

const at::Tensor& emu_resize_(const at::Tensor& self, c10::SymIntArrayRef size,
                              std::optional<at::MemoryFormat> memory_format) {
  auto* impl = self.unsafeGetTensorImpl();
  impl->set_sizes_contiguous(C10_AS_INTARRAYREF_SLOW(size));
  if (memory_format.has_value() && *memory_format != at::MemoryFormat::Preserve) {
    impl->empty_tensor_restride(*memory_format);
  }
  const size_t needed = at::detail::computeStorageNbytes(self.sizes(), self.strides(), self.dtype().itemsize(),
                                                         self.storage_offset());
  if (needed > self.storage().nbytes()) {
    resize_storage(self.storage().unsafeGetStorageImpl(), needed);
  }
  return self;
}

at::Tensor& copy_between(at::Tensor& dst, const at::Tensor& src) {
  const bool to_emu = dst.device().type() == kEmu;
  const bool from_emu = src.device().type() == kEmu;
  HostViews views;
  at::Tensor hd = views.of(dst);
  const at::Tensor hs = views.of(src);
  const int64_t bytes = static_cast<int64_t>(dst.numel() * dst.element_size());
  if (to_emu && from_emu) {
    submit("emuLaunchKernel", "emu_copy_kernel", Kind::Kernel, bytes, [&] { hd.copy_(hs); });
  } else if (to_emu) {
    submit("emuMemcpyHtoD", "Memcpy HtoD (Host -> emu)", Kind::Memcpy, bytes, [&] { hd.copy_(hs); });
  } else {
    submit("emuMemcpyDtoH", "Memcpy DtoH (emu -> Host)", Kind::Memcpy, bytes, [&] { hd.copy_(hs); });
  }
  return dst;
}

at::Tensor& emu_copy_(at::Tensor& self, const at::Tensor& src, bool non_blocking) {
  (void)non_blocking;
  return copy_between(self, src);
}

at::Tensor emu_copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  (void)non_blocking;
  at::Tensor out = dst;
  copy_between(out, self);
  return dst;
}

at::Tensor emu_copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  at::Tensor out = dst;
  if (!out.sizes().equals(self.sizes())) {
    out.resize_(self.sizes());
  }
  copy_between(out, self);
  return dst;
}

at::Scalar emu_local_scalar_dense(const at::Tensor& self) {
  HostViews views;
  const at::Tensor host = views.of(self);
  at::Scalar out;
  submit("emuMemcpyDtoH", "Memcpy DtoH (emu -> Host)", Kind::Memcpy, static_cast<int64_t>(self.element_size()),
         [&] { out = at::_ops::_local_scalar_dense::redispatch(c10::DispatchKeySet(c10::DispatchKey::CPU), host); });
  return out;
}

// ---------------------------------------------------------------------------------------------
// Kineto: the activity profiler torch's profiler starts for ProfilerActivity.PrivateUse1.

class EmuSession final : public libkineto::IActivityProfilerSession {
 public:
  explicit EmuSession(std::set<libkineto::ActivityType> types) : types_(std::move(types)) {}

  void start() override {
    {
      std::lock_guard<std::mutex> lock(g_records_mutex);
      g_records.clear();
    }
    g_recording.store(true);
    status_ = libkineto::TraceStatus::RECORDING;
  }

  void stop() override {
    g_recording.store(false);
    std::lock_guard<std::mutex> lock(g_records_mutex);
    records_.swap(g_records);
    status_ = libkineto::TraceStatus::PROCESSING;
  }

  std::vector<std::string> errors() override {
    return {};
  }

  void processTrace(libkineto::ActivityLogger& logger) override {
    processTrace(logger, nullptr, 0, 0);
  }

  void processTrace(libkineto::ActivityLogger& logger, libkineto::getLinkedActivityCallback linked,
                    int64_t start, int64_t end) override {
    buffer_ = std::make_unique<libkineto::CpuTraceBuffer>();
    buffer_->gpuOpCount = 0;
    int64_t lo = start, hi = end;
    for (const Record& r : records_) {
      lo = lo ? std::min(lo, r.start) : r.start;
      hi = std::max(hi, r.end);
    }
    buffer_->span = libkineto::TraceSpan(lo, hi, "emu");
    const int32_t pid = static_cast<int32_t>(getpid());
    for (const Record& r : records_) {
      const auto type = r.kind == Kind::Runtime  ? libkineto::ActivityType::PRIVATEUSE1_RUNTIME
                        : r.kind == Kind::Kernel ? libkineto::ActivityType::CONCURRENT_KERNEL
                                                 : libkineto::ActivityType::GPU_MEMCPY;
      if (!types_.count(type) || (start && r.end < start) || (end && r.start > end)) {
        continue;
      }
      buffer_->emplace_activity(buffer_->span, type, r.name);
      auto& act = *buffer_->activities.back();
      act.startTime = r.start;
      act.endTime = r.end;
      act.id = r.correlation;
      if (r.kind == Kind::Runtime) {
        act.device = pid;
        act.resource = r.thread;
        act.threadId = r.thread;
      } else {
        act.device = 0;
        act.resource = static_cast<int32_t>(r.stream);
        act.threadId = static_cast<int32_t>(r.stream);
        act.addMetadata("device", 0);
        act.addMetadata("stream", r.stream);
        if (r.kind == Kind::Memcpy) {
          act.addMetadata("bytes", r.bytes);
        }
        streams_.insert(r.stream);
      }
      act.addMetadata("correlation", r.correlation);
      act.linked = (linked && r.external) ? linked(static_cast<int32_t>(r.external)) : nullptr;
      act.flow.id = static_cast<uint32_t>(r.correlation);
      act.flow.type = libkineto::kLinkAsyncCpuGpu;
      act.flow.start = r.kind == Kind::Runtime;
      logger.handleActivity(act);
    }
  }

  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override {
    return std::make_unique<libkineto::DeviceInfo>(libkineto::DeviceInfo{0, 0, "emu 0", "emu 0"});
  }

  std::vector<libkineto::ResourceInfo> getResourceInfos() override {
    std::vector<libkineto::ResourceInfo> out;
    for (c10::StreamId s : streams_) {
      out.push_back(libkineto::ResourceInfo{s, s, 0, "stream " + std::to_string(s)});
    }
    return out;
  }

  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override {
    return std::move(buffer_);
  }

  void pushCorrelationId(uint64_t id) override {
    tls_external.push_back(id);
  }

  void popCorrelationId() override {
    if (!tls_external.empty()) {
      tls_external.pop_back();
    }
  }

 private:
  std::set<libkineto::ActivityType> types_;
  std::vector<Record> records_;
  std::set<c10::StreamId> streams_;
  std::unique_ptr<libkineto::CpuTraceBuffer> buffer_;
};

class EmuProfiler final : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override {
    return name_;
  }

  const std::set<libkineto::ActivityType>& availableActivities() const override {
    return types_;
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(const std::set<libkineto::ActivityType>& types,
                                                                 const libkineto::Config& config) override {
    (void)config;
    std::set<libkineto::ActivityType> wanted;
    for (auto t : types) {
      if (types_.count(t)) {
        wanted.insert(t);
      }
    }
    if (wanted.empty()) {
      return nullptr;
    }
    return std::make_unique<EmuSession>(std::move(wanted));
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(int64_t ts_ms, int64_t duration_ms,
                                                                 const std::set<libkineto::ActivityType>& types,
                                                                 const libkineto::Config& config) override {
    (void)ts_ms; (void)duration_ms;
    return configure(types, config);
  }

 private:
  std::string name_{"emu"};
  std::set<libkineto::ActivityType> types_{
      libkineto::ActivityType::PRIVATEUSE1_RUNTIME, libkineto::ActivityType::PRIVATEUSE1_DRIVER,
      libkineto::ActivityType::CONCURRENT_KERNEL, libkineto::ActivityType::GPU_MEMCPY};
};

}  // namespace

REGISTER_PRIVATEUSE1_PROFILER(EmuProfiler);

namespace {

struct RegisterHooks {
  RegisterHooks() {
    at::RegisterPrivateUse1HooksInterface(&g_hooks);
  }
};
RegisterHooks g_register_hooks;

// The ops with an emu kernel (ATen's CPU kernel on host memory): what RMSNorm op by op and a small
// transformer block (embedding, linear, attention, MLP, residuals, softmax, masks) call.
const char* const kEmuKernels[] = {
    "add.Tensor", "add.Scalar", "add_.Tensor", "add_.Scalar", "add.out", "sub.Tensor", "sub_.Tensor", "sub.out",
    "rsub.Scalar", "mul.Tensor", "mul.Scalar", "mul_.Tensor", "mul_.Scalar", "mul.out", "div.Tensor", "div.Scalar",
    "div_.Tensor", "div_.Scalar", "div.Tensor_mode", "div.out", "neg", "neg.out", "pow.Tensor_Scalar",
    "pow.Tensor_Tensor", "pow.Tensor_Scalar_out", "rsqrt", "rsqrt.out", "sqrt", "exp", "log", "tanh", "sigmoid",
    "silu", "silu_", "silu.out", "gelu", "gelu.out", "relu", "relu_", "abs", "cos", "sin", "reciprocal",
    "clamp", "where.self", "masked_fill.Scalar", "masked_fill_.Scalar", "masked_fill_.Tensor", "fill_.Scalar",
    "fill_.Tensor", "zero_", "eq.Scalar", "eq.Tensor", "ne.Scalar", "lt.Scalar", "gt.Scalar", "ge.Scalar",
    "le.Scalar", "logical_not", "maximum", "minimum", "tril", "triu", "tril_", "triu_", "cat", "cat.out",
    "index.Tensor", "index_select", "gather", "mean.dim", "mean.out", "sum.dim_IntList", "sum", "amax", "max.dim",
    "argmax", "cumsum", "_softmax", "_softmax.out", "_log_softmax", "mm", "mm.out", "bmm", "bmm.out", "addmm",
    "addmm.out", "baddbmm", "arange.start_out", "uniform_", "normal_", "random_", "random_.from",
    "bernoulli_.float", "erf", "topk", "scaled_dot_product_attention",
};

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", TORCH_FN(emu_empty));
  m.impl("empty_strided", TORCH_FN(emu_empty_strided));
  m.impl("as_strided", TORCH_FN(emu_as_strided));
  m.impl("view", TORCH_FN(emu_view));
  m.impl("_reshape_alias", TORCH_FN(emu_reshape_alias));
  m.impl("resize_", TORCH_FN(emu_resize_));
  m.impl("copy_", TORCH_FN(emu_copy_));
  m.impl("_copy_from", TORCH_FN(emu_copy_from));
  m.impl("_copy_from_and_resize", TORCH_FN(emu_copy_from_and_resize));
  m.impl("_local_scalar_dense", TORCH_FN(emu_local_scalar_dense));
  m.impl("rms_norm", TORCH_FN(emu_rms_norm));
  for (const char* name : kEmuKernels) {
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&emu_kernel>());
  }
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&emu_fallback>());
}

// Python's handle on the device: torch.ops.emu.*
namespace {

std::tuple<std::vector<std::string>, std::vector<int64_t>> fallback_counts() {
  std::lock_guard<std::mutex> lock(g_fallback_mutex);
  std::vector<std::string> names;
  std::vector<int64_t> counts;
  for (const auto& [n, c] : g_fallbacks) {
    names.push_back(n);
    counts.push_back(c);
  }
  return {names, counts};
}

void reset_counts() {
  std::lock_guard<std::mutex> lock(g_fallback_mutex);
  g_fallbacks.clear();
  g_kernels.store(0);
  g_copies.store(0);
}

void force_fallback(std::vector<std::string> ops) {
  std::lock_guard<std::mutex> lock(g_fallback_mutex);
  g_forced = std::set<std::string>(ops.begin(), ops.end());
}

std::vector<int64_t> launches() {
  return {g_kernels.load(), g_copies.load()};
}

// Execution is in order on the launching thread, so the device is idle when this is called: the call is
// recorded (a host sync, as a real runtime's) and returns.
void synchronize() {
  if (g_recording.load()) {
    const int64_t t0 = now_ns();
    const uint64_t ext = tls_external.empty() ? 0 : tls_external.back();
    keep({Kind::Runtime, "emuDeviceSynchronize", t0, now_ns() + 1, g_next_correlation.fetch_add(1), ext,
          thread_id(), tls_stream, 0});
  }
}

int64_t new_stream() {
  return g_next_stream.fetch_add(1);
}

int64_t current_stream() {
  return tls_stream;
}

void set_stream(int64_t id) {
  TORCH_CHECK(id >= 0 && id < g_next_stream.load(), "emu: no stream ", id);
  tls_stream = id;
}

}  // namespace

TORCH_LIBRARY(emu, m) {
  m.def("fallback_counts() -> (str[], int[])", &fallback_counts);
  m.def("reset_counts() -> ()", &reset_counts);
  m.def("force_fallback(str[] ops) -> ()", &force_fallback);
  m.def("launches() -> int[]", &launches);
  m.def("synchronize() -> ()", &synchronize);
  m.def("new_stream() -> int", &new_stream);
  m.def("current_stream() -> int", &current_stream);
  m.def("set_stream(int id) -> ()", &set_stream);
}
