// A child process for tests: spawned from a built binary, its stdout read
// line by line, killed and reaped however the test ends.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

extern char** environ;

namespace rpc::test {

class Subprocess {
 public:
  // extra_env ("NAME=value") is added to this process's environment.
  explicit Subprocess(std::vector<std::string> argv, std::vector<std::string> extra_env = {}) {
    int out[2];
    if (::pipe(out) != 0) return;
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
    posix_spawn_file_actions_addclose(&actions, out[0]);
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    std::vector<char*> env;
    for (auto& e : extra_env) env.push_back(e.data());
    for (char** e = environ; *e != nullptr; e++) env.push_back(*e);
    env.push_back(nullptr);
    if (posix_spawn(&pid_, args[0], &actions, nullptr, args.data(), env.data()) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&actions);
    ::close(out[1]);
    stdout_fd_ = out[0];
  }
  ~Subprocess() {
    kill(SIGKILL);
    wait();
    if (stdout_fd_ >= 0) ::close(stdout_fd_);
  }
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  bool started() const { return pid_ > 0; }
  void kill(int sig) {
    if (pid_ > 0 && !reaped_) ::kill(pid_, sig);
  }
  // Exit status, or 128 + signal; -1 if it could not be reaped.
  int wait() {
    if (pid_ <= 0) return -1;
    if (!reaped_) {
      int status = 0;
      if (::waitpid(pid_, &status, 0) != pid_) return -1;
      reaped_ = true;
      status_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    return status_;
  }
  // Reads stdout until a line containing `text` appears; false on timeout/EOF.
  bool wait_for_output(const std::string& text, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (output_.find(text) == std::string::npos) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd p{stdout_fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
      char buf[512];
      const ssize_t n = ::read(stdout_fd_, buf, sizeof(buf));
      if (n <= 0) return false;
      output_.append(buf, static_cast<size_t>(n));
    }
    return true;
  }
  const std::string& output() const { return output_; }

 private:
  pid_t pid_ = -1;
  int stdout_fd_ = -1;
  bool reaped_ = false;
  int status_ = -1;
  std::string output_;
};

}  // namespace rpc::test
