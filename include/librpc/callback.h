// Callback: a move-only callable with small-buffer storage, the type of
// continuations (and of work submitted to an EventLoopThread). Like C++23's
// std::move_only_function, which C++20 lacks, with a guarantee that matters
// on the datapath: a callable of at most kInlineBytes (three pointers: a
// lambda capturing `this` and two pointers, or a function pointer) that is
// nothrow-movable is stored inline, without allocating. Larger captures are
// moved to the heap (constructing the Callback may then throw
// std::bad_alloc; the Rpc calls that take one never allocate for it).
#pragma once

#include <cstddef>
#include <cstring>
#include <functional>
#include <new>
#include <type_traits>
#include <utility>

namespace rpc {

template <typename Signature>
class Callback;

template <typename R, typename... Args>
class Callback<R(Args...)> {
 public:
  static constexpr size_t kInlineBytes = 3 * sizeof(void*);

  // Stored inline (no allocation) exactly when this holds for the callable.
  template <typename F>
  static constexpr bool kStoredInline =
      sizeof(F) <= kInlineBytes &&
      alignof(F) <= alignof(void*) && std::is_nothrow_move_constructible_v<F>;

  Callback() noexcept = default;
  Callback(std::nullptr_t) noexcept {}  // NOLINT(implicit)

  template <typename F>
  requires(!std::is_same_v<std::remove_cvref_t<F>, Callback> &&
           std::is_invocable_r_v<R, std::remove_cvref_t<F>&, Args...>)
      Callback(F&& f) {  // NOLINT(implicit): a lambda is passed where a Callback is taken
    construct(std::forward<F>(f));
  }

  Callback(Callback&& other) noexcept { take(other); }
  Callback& operator=(Callback&& other) noexcept {
    if (this != &other) {
      reset();
      take(other);
    }
    return *this;
  }
  Callback& operator=(std::nullptr_t) noexcept {
    reset();
    return *this;
  }
  // Replaces what it holds with f, built in place (no temporary Callback).
  template <typename F>
  requires(!std::is_same_v<std::remove_cvref_t<F>, Callback> &&
           std::is_invocable_r_v<R, std::remove_cvref_t<F>&, Args...>) void emplace(F&& f) {
    reset();
    construct(std::forward<F>(f));
  }
  Callback(const Callback&) = delete;
  Callback& operator=(const Callback&) = delete;
  ~Callback() { reset(); }

  explicit operator bool() const noexcept { return invoke_ != nullptr; }

  // REQUIRES: not empty.
  R operator()(Args... args) { return invoke_(storage_, std::forward<Args>(args)...); }

  // Destroys the callable (and what it captured); the Callback is empty.
  void reset() noexcept {
    if (manage_ != nullptr) manage_(Op::kDestroy, storage_, nullptr);
    invoke_ = nullptr;
    manage_ = nullptr;
  }

 private:
  enum class Op { kMoveTo, kDestroy };  // kMoveTo also destroys the source
  using Invoke = R (*)(void* storage, Args... args);
  using Manage = void (*)(Op op, void* self, void* other) noexcept;

  // REQUIRES: empty.
  template <typename F>
  void construct(F&& f) {
    using Fn = std::remove_cvref_t<F>;
    if constexpr (std::is_pointer_v<Fn> || std::is_member_pointer_v<Fn>) {
      if (f == nullptr) return;  // an empty function pointer makes an empty Callback
    }
    if constexpr (kStoredInline<Fn>) {
      ::new (static_cast<void*>(storage_)) Fn(std::forward<F>(f));
      invoke_ = [](void* storage, Args... args) -> R {
        return std::invoke(*static_cast<Fn*>(storage), std::forward<Args>(args)...);
      };
      // Trivial callables (function pointers, lambdas capturing pointers)
      // are moved by copying the bytes and need no destruction.
      if constexpr (!std::is_trivially_copyable_v<Fn> || !std::is_trivially_destructible_v<Fn>) {
        manage_ = [](Op op, void* self, void* other) noexcept {
          Fn* fn = static_cast<Fn*>(self);
          if (op == Op::kMoveTo) ::new (other) Fn(std::move(*fn));
          fn->~Fn();
        };
      }
    } else {
      Fn* heap = new Fn(std::forward<F>(f));
      ::new (static_cast<void*>(storage_)) Fn*(heap);
      invoke_ = [](void* storage, Args... args) -> R {
        return std::invoke(**static_cast<Fn**>(storage), std::forward<Args>(args)...);
      };
      manage_ = [](Op op, void* self, void* other) noexcept {
        Fn** fn = static_cast<Fn**>(self);
        if (op == Op::kMoveTo) {
          ::new (other) Fn*(*fn);
        } else {
          delete *fn;
        }
      };
    }
  }

  void take(Callback& other) noexcept {
    if (other.manage_ != nullptr) {
      other.manage_(Op::kMoveTo, other.storage_, storage_);
    } else {  // trivial or empty: the bytes are the callable (no branch on which)
      std::memcpy(storage_, other.storage_, kInlineBytes);
    }
    invoke_ = other.invoke_;
    manage_ = other.manage_;
    other.invoke_ = nullptr;
    other.manage_ = nullptr;
  }

  alignas(void*) unsigned char storage_[kInlineBytes];
  Invoke invoke_ = nullptr;
  Manage manage_ = nullptr;
};

}  // namespace rpc
