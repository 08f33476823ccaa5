"""A password hasher for tests that counts password checks and can hold them, so a test can see how many
attempts of a burst reach the hasher while they are all still in flight. Configured per test through
PASSWORD_HASHERS; it hashes like the test settings' MD5 hasher, so existing users' passwords verify."""

import threading

from django.contrib.auth.hashers import MD5PasswordHasher


class GatedCountingHasher(MD5PasswordHasher):
    lock = threading.Lock()
    checks = 0
    gate = threading.Event()

    @classmethod
    def reset(cls) -> None:
        with cls.lock:
            cls.checks = 0
        cls.gate.clear()

    def _count_and_wait(self) -> None:
        with self.lock:
            type(self).checks += 1
        # Bounded: a test that fails never leaves a request thread hanging.
        type(self).gate.wait(timeout=120)

    def verify(self, password: str, encoded: str) -> bool:
        self._count_and_wait()
        return super().verify(password, encoded)
