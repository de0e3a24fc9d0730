from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from checkpoints.api import api

from .views import favicon, live, metrics, ready

urlpatterns = [
    path("favicon.ico", favicon),
    path("metrics", metrics, name="metrics"),
    path("health/live", live, name="health_live"),
    path("health/", ready, name="health"),
    path("admin/", admin.site.urls),
    path("api/v1/", api.urls),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("", include("dashboard.urls")),
]

handler400 = "config.views.bad_request_error"
handler404 = "config.views.not_found"
handler500 = "config.views.api_server_error"
