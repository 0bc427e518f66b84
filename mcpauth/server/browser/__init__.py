"""What people see: sign-in, consent, the account page, browser sessions, CSRF defence and the HTML
templates."""
