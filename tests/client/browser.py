"""A stand-in for the system browser (used through $BROWSER): follow the URL to the end."""

import sys

import httpx

if __name__ == "__main__":
    httpx.get(sys.argv[1], follow_redirects=True, timeout=10)
