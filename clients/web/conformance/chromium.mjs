// The flags Debian's Chromium needs on this machine's closed network: without the
// background-networking ones it keeps dialling out, and its connections are refused.
// A fresh profile comes from Playwright (a temporary --user-data-dir per launch).
export const CHROMIUM_FLAGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
  "--autoplay-policy=no-user-gesture-required",
];
